-- sluice.source_pos: positions of a Lua file's table constructors (pure Lua, no gateway).
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
local sp = require("sluice.source_pos")

describe("sluice.source_pos.scan", function()
    it("maps `return { ... }`: items, keys and values, nested constructors", function()
        local root = sp.scan(table.concat({
            "-- a comment with { braces }",
            "return {",
            "  { name = \"a\", match = { paths = { \"/a\" } } },",
            "  {",
            "    name = [[b, }]],",
            "    match = function(req) local x, y = 1, { 2 }; if x then return true end end,",
            "    plugins = { { name = \"cors\", config = { max_age = 5, [\"x-y\"] = 1 } } },",
            "  },",
            "}",
        }, "\n"))
        assert.equal(2, root.line)
        assert.equal(2, #root.items)
        assert.same({ 3, 3 }, { root.items[1].line, root.items[1].col })
        local b = root.items[2].node
        assert.same({ 5, 5, 5, 12 }, { b.fields.name.kline, b.fields.name.kcol, b.fields.name.line, b.fields.name.col })
        assert.equal(6, b.fields.match.line)
        assert.is_nil(b.fields.y) -- the function body's locals are not fields
        local cfg = b.fields.plugins.node.items[1].node.fields.config.node
        assert.same({ 7, 45, 7, 55 }, sp.positions(cfg).max_age)
        assert.same({ 7, 59, 7, 68 }, sp.positions(cfg)["x-y"])
    end)

    it("follows `return NAME` to a top-level `NAME = { ... }`", function()
        local root = sp.scan("local routes = {\n  { name = 'a' },\n  { name = 'b' },\n}\nreturn routes\n")
        assert.equal(2, #root.items)
        assert.equal(3, root.items[2].line)
    end)

    it("a list built in code: the table found holds none of its items (the loader's count check then "
       .. "falls back to line 1)", function()
        local root = sp.scan("local t = {}\nfor i = 1, 2 do t[i] = { name = 'r' .. i } end\nreturn t\n")
        assert.equal(0, #root.items)
        assert.is_nil(sp.scan("return build()\n"))
    end)
end)
