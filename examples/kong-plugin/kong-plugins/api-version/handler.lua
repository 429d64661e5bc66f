-- Routes by API version: the version comes from a header (or the default); an unknown one
-- is refused with Kong's JSON error; the upstream gets it as X-Api-Version and the client
-- gets it back. A Kong plugin, unchanged: sluice runs it on its kong.* layer.
local kong = kong

local ApiVersion = {
  PRIORITY = 900,
  VERSION = "1.2.0",
}

function ApiVersion:access(conf)
  local version = kong.request.get_header(conf.header_name) or conf.default_version
  if not version then
    return kong.response.exit(400, { message = "missing " .. conf.header_name })
  end
  local known = false
  for _, v in ipairs(conf.versions) do
    if v == version then
      known = true
      break
    end
  end
  if not known then
    return kong.response.exit(404, { message = "unknown API version " .. version })
  end
  kong.service.request.set_header("X-Api-Version", version)
  kong.service.request.set_path("/" .. version .. kong.request.get_path())
  kong.ctx.plugin.version = version
end

function ApiVersion:header_filter(conf)
  if kong.ctx.plugin.version then
    kong.response.set_header(conf.header_name, kong.ctx.plugin.version)
  end
end

return ApiVersion
