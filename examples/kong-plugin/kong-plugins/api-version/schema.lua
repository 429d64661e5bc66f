-- A Kong plugin's schema as Kong users write it: copied here unchanged.
local typedefs = require "kong.db.schema.typedefs"

local config = {
  type = "record",
  fields = {
    { header_name = typedefs.header_name { default = "X-Api-Version" } },
    { versions = { type = "array", elements = { type = "string" }, required = true, len_min = 1 } },
    { default_version = { type = "string" } },
  },
}

return {
  name = "api-version",
  fields = {
    { protocols = typedefs.protocols_http },
    { config = config },
  },
}
