-- Routes written in Lua, beside the YAML ones of gw.yaml; the same keys, and a match may
-- be a function of the request (sluice.request).
return {
    -- beta testers reach the beta upstream on any /api/ path: the same prefix as the YAML
    -- route plus one more condition, so this route ranks above it
    {
        name = "api-beta",
        upstream = "beta",
        match = { paths = { "/api/" }, headers = { ["X-Beta"] = "1" } },
    },
    {
        name = "legacy",
        upstream = "api",
        strip_prefix = true,
        match = { paths = { "/old/" } },
        plugins = { { name = "headers", config = { request = { set = { ["X-Legacy"] = "1" } } } } },
    },
    -- a function match ranks like "/" with one more condition: above a catch-all, below
    -- any longer prefix
    {
        name = "internal",
        upstream = "api",
        match = function(req) return req.get_path() == "/internal" and req.get_client_ip() == "127.0.0.1" end,
    },
}
