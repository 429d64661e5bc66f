-- sluice.libpath: where sluice.cli and sluice.test find libsluice.so and libsluice_test.so.
local libpath = require("sluice.libpath")

local function tmpdir()
    local d = os.tmpname()
    os.remove(d)
    assert(os.execute("mkdir -p '" .. d .. "/bin' '" .. d .. "/lib/x86_64-linux-gnu'") == 0)
    return d
end

local function touch(p) assert(io.open(p, "wb")):close() end

describe("sluice.libpath", function()
    it("dir is a path's folder, '.' for a bare name", function()
        assert.equal("/usr/bin", libpath.dir("/usr/bin/sluice"))
        assert.equal(".", libpath.dir("sluice"))
    end)

    it("finds a library beside the folder first (a build tree)", function()
        local d = tmpdir()
        touch(d .. "/bin/libsluice_test.so")
        touch(d .. "/lib/x86_64-linux-gnu/libsluice_test.so")
        assert.equal(d .. "/bin/libsluice_test.so", libpath.find(d .. "/bin", "libsluice_test.so"))
        os.execute("rm -rf '" .. d .. "'")
    end)

    it("else in the lib folders of the prefix a bin folder belongs to (an install)", function()
        local d = tmpdir()
        touch(d .. "/lib/x86_64-linux-gnu/libsluice_test.so")
        assert.equal(d .. "/lib/x86_64-linux-gnu/libsluice_test.so", libpath.find(d .. "/bin", "libsluice_test.so"))
        assert.is_nil(libpath.find(d .. "/bin", "libnothing.so"))
        os.execute("rm -rf '" .. d .. "'")
    end)
end)
