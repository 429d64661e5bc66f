local kong = kong

local SameLogic = { PRIORITY = 1000, VERSION = "1.0" }

function SameLogic:access(conf)
  kong.ctx.plugin.agent = kong.request.get_header("User-Agent")
  kong.service.request.set_header(conf.header, "1")
end

function SameLogic:header_filter(conf)
  if kong.ctx.plugin.agent then
    kong.response.set_header("X-Bench-Resp", "1")
  end
end

return SameLogic
