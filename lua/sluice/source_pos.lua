-- sluice.source_pos: where the table constructors of a Lua file stand, so errors in a
-- lua_routes file can name FILE:LINE:COL of the route, key or value at fault (a Lua
-- table keeps no positions once built).
--
-- scan(src) tokenizes the source (comments, short and long strings, numbers, names) and
-- records every table constructor as { line, col, fields = { NAME = field }, items =
-- { field, ... } } where a field is { kline, kcol, line, col, node } (the key's and the
-- value's positions; node when the value is itself a constructor). It returns the
-- constructor the chunk returns: `return { ... }`, or `return NAME` with NAME assigned a
-- constructor at the top level. A file that builds its routes in a loop has no such
-- table: nil, and the caller falls back to the file's first line.
local byte, sub, find = string.byte, string.sub, string.find
local pairs, ipairs, tostring = pairs, ipairs, tostring

local _M = {}

local BLOCK_OPEN = { ["function"] = 1, ["do"] = 1, ["if"] = 1, ["repeat"] = 1 }
local BLOCK_CLOSE = { ["end"] = 1, ["until"] = 1 }

-- The tokens of src: { kind, text, line, col } with kind "name", "str", "num", "op".
local function tokens(src)
    local out, i, n, line, lstart = {}, 1, #src, 1, 1
    local function newlines(a, b)
        local p = a
        while true do
            local q = find(src, "\n", p, true)
            if not q or q > b then return end
            line, lstart, p = line + 1, q + 1, q + 1
        end
    end
    local function long_end(at) -- at points at the first '['; returns the index after the closing bracket
        local eq = src:match("^%[(=*)%[", at)
        if not eq then return nil end
        local close = "]" .. eq .. "]"
        local e = find(src, close, at + #eq + 2, true)
        return e and e + #close or n + 1
    end
    while i <= n do
        local c = byte(src, i)
        local col = i - lstart + 1
        if c == 10 then
            line, lstart, i = line + 1, i + 1, i + 1
        elseif c == 32 or c == 9 or c == 13 then
            i = i + 1
        elseif sub(src, i, i + 1) == "--" then
            local e = byte(src, i + 2) == 91 and long_end(i + 2)
            if e then
                newlines(i, e - 1)
                i = e
            else
                local q = find(src, "\n", i, true)
                i = q or n + 1
            end
        elseif c == 34 or c == 39 then -- "..." or '...'
            local j = i + 1
            while j <= n do
                local d = byte(src, j)
                if d == 92 then j = j + 2
                elseif d == c or d == 10 then break
                else j = j + 1 end
            end
            out[#out + 1] = { "str", sub(src, i + 1, j - 1), line, col }
            newlines(i, j)
            i = j + 1
        elseif c == 91 and long_end(i) then -- [[ ... ]]
            local e = long_end(i)
            out[#out + 1] = { "str", "", line, col }
            newlines(i, e - 1)
            i = e
        elseif find(src, "^[%a_]", i) then
            local w = src:match("^[%w_]+", i)
            out[#out + 1] = { "name", w, line, col }
            i = i + #w
        elseif find(src, "^%d", i) or find(src, "^%.%d", i) then
            local w = src:match("^0[xX][%x%.]+", i) or src:match("^[%d%.]+[eE][+-]?%d+", i) or src:match("^[%d%.]+", i)
            out[#out + 1] = { "num", w, line, col }
            i = i + #w
        else
            local op = src:match("^%.%.%.", i) or src:match("^[=~<>]=", i) or src:match("^%.%.", i)
                or src:match("^::", i) or sub(src, i, i)
            out[#out + 1] = { "op", op, line, col }
            i = i + #op
        end
    end
    return out
end

function _M.scan(src)
    local toks = tokens(src)
    local frames = {}       -- open constructors, innermost last
    local top_assign = {}   -- NAME -> constructor assigned at the top level
    local returned, ret_name
    local depth_block = 0   -- blocks open outside any constructor
    local function tok(k) return toks[k] end
    local k = 1
    while k <= #toks do
        local t = toks[k]
        local kind, text = t[1], t[2]
        local f = frames[#frames]
        if kind == "op" and text == "{" then
            local node = { line = t[3], col = t[4], fields = {}, items = {} }
            if f and f.at_field then -- a list item that is a constructor
                f.node.items[#f.node.items + 1] = { kline = t[3], kcol = t[4], line = t[3], col = t[4], node = node }
                f.at_field = false
            elseif f and f.value_pending and f.blocks == 0 and f.parens == 0 then
                f.field.node = node
            elseif not f and depth_block == 0 then
                local p1, p2 = tok(k - 1), tok(k - 2)
                if p1 and p1[2] == "return" then returned = node
                elseif p1 and p1[2] == "=" and p2 and p2[1] == "name" then top_assign[p2[2]] = node end
            end
            if f then f.value_pending = false end
            frames[#frames + 1] = { node = node, at_field = true, blocks = 0, parens = 0 }
        elseif kind == "op" and text == "}" and f and f.blocks == 0 and f.parens == 0 then
            frames[#frames] = nil
            local up = frames[#frames]
            if up then up.value_pending = false end
        elseif f then
            if kind == "name" and BLOCK_OPEN[text] then f.blocks = f.blocks + 1
            elseif kind == "name" and BLOCK_CLOSE[text] then f.blocks = f.blocks - 1
            elseif kind == "op" and (text == "(" or text == "[") and not f.at_field then f.parens = f.parens + 1
            elseif kind == "op" and (text == ")" or text == "]") then f.parens = f.parens - 1 end
            if f.blocks == 0 and f.parens == 0 and kind == "op" and (text == "," or text == ";") then
                f.at_field, f.value_pending = true, false
            elseif f.at_field then
                f.at_field = false
                local node = f.node
                local nx, nx2, nx3 = tok(k + 1), tok(k + 2), tok(k + 3)
                if kind == "name" and nx and nx[2] == "=" then
                    local v = tok(k + 2)
                    f.field = { kline = t[3], kcol = t[4], line = v and v[3], col = v and v[4] }
                    node.fields[text] = f.field
                    k = k + 1 -- past '='
                elseif kind == "op" and text == "[" and nx and nx[1] == "str" and nx2 and nx2[2] == "]"
                    and nx3 and nx3[2] == "=" then
                    local v = tok(k + 4)
                    f.field = { kline = nx[3], kcol = nx[4], line = v and v[3], col = v and v[4] }
                    node.fields[nx[2]] = f.field
                    k = k + 3
                else
                    f.field = { kline = t[3], kcol = t[4], line = t[3], col = t[4] }
                    node.items[#node.items + 1] = f.field
                    if kind == "op" and (text == "(" or text == "[") then f.parens = f.parens + 1 end
                    f.value_pending = false
                    k = k + 1
                    goto continue
                end
                f.value_pending = true
            else
                f.value_pending = false
            end
        else
            if kind == "name" and BLOCK_OPEN[text] then depth_block = depth_block + 1
            elseif kind == "name" and BLOCK_CLOSE[text] then depth_block = depth_block - 1
            elseif kind == "name" and text == "return" and depth_block == 0 then
                local nx = tok(k + 1)
                if nx and nx[1] == "name" then ret_name = nx[2] end
            end
        end
        k = k + 1
        ::continue::
    end
    if returned then return returned end
    return ret_name and top_assign[ret_name] or nil
end

-- {"a.b":[kline,kcol,vline,vcol], "a.2":[...]}: the positions of a plugin config written
-- as a constructor, keyed like the YAML config's positions_json (list items 1-based).
function _M.positions(node, prefix, out)
    out = out or {}
    if not node then return out end
    local function put(path, f)
        out[path] = { f.kline, f.kcol, f.line, f.col }
        if f.node then _M.positions(f.node, path, out) end
    end
    for name, f in pairs(node.fields) do put(prefix and (prefix .. "." .. name) or name, f) end
    for i, f in ipairs(node.items) do put(prefix and (prefix .. "." .. i) or tostring(i), f) end
    return out
end

return _M
