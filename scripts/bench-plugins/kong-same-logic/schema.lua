-- scripts/bench-plugins/same-logic.lua's logic, as a Kong plugin.
return {
  name = "kong-same-logic",
  fields = { { config = { type = "record", fields = {
    { header = { type = "string", default = "X-Bench-Req" } },
  } } } },
}
