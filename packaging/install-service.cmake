# The service's config and systemd unit, placed by the prefix of the install that runs this
# (`cmake --install`, and cpack, whose prefix is always /usr): the prefix /usr puts the
# config in /etc/sluice and the unit in /usr/lib/systemd/system; any other prefix P puts
# them in P/etc/sluice and P/lib/systemd/system. Decided at install time, not at configure
# time, so a tree configured with the default prefix (/usr/local) still packages under /usr
# and `cmake --install --prefix X` writes a unit that names X/bin/sluice.
# In: SL_SRC_DIR (the source tree), SL_BIN_DIR (the build tree).
set(prefix "${CMAKE_INSTALL_PREFIX}")
if(prefix STREQUAL "/usr" OR prefix STREQUAL "/usr/")
    set(prefix "/usr")
    set(etc "/etc")
else()
    set(etc "${prefix}/etc")
endif()
set(SL_FULL_BINDIR "${prefix}/bin")
set(SL_FULL_SYSCONFDIR "${etc}")
set(SL_FULL_DOCDIR "${prefix}/share/doc/sluice")
configure_file("${SL_SRC_DIR}/packaging/sluice.service.in" "${SL_BIN_DIR}/install-unit/sluice.service" @ONLY)
file(INSTALL DESTINATION "${etc}/sluice" TYPE FILE FILES "${SL_SRC_DIR}/packaging/sluice.yaml")
file(INSTALL DESTINATION "${prefix}/lib/systemd/system" TYPE FILE
     FILES "${SL_BIN_DIR}/install-unit/sluice.service")
