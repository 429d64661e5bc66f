-- body-edit (test fixture): a body_filter. mode upper: upper-cases every piece; tag:
-- appends `tag` once, on the last call; keep: returns nil (the piece goes on unchanged);
-- fail: raises once `fail_after` bytes went through; bad: returns a table.
return {
    name = "body-edit",
    version = "1.0",
    schema = {
        mode = { type = "enum", one_of = { "upper", "tag", "keep", "fail", "bad" }, default = "upper" },
        tag = { type = "string", default = "[end]" },
        fail_after = { type = "integer", default = 0 },
    },
    body_filter = function(conf, ctx, chunk, eof)
        -- ctx is the route's (shared by its plugins): this instance keeps its own counts
        local mine = ctx[conf] or { seen = 0, eofs = 0 }
        ctx[conf] = mine
        mine.seen = mine.seen + #chunk
        if eof then mine.eofs = mine.eofs + 1 end
        if conf.mode == "upper" then return chunk:upper() end
        if conf.mode == "tag" then
            if eof then return chunk .. conf.tag .. "(eofs=" .. mine.eofs .. ")" end
            return nil
        end
        if conf.mode == "fail" and mine.seen > conf.fail_after then error("filter gave up") end
        if conf.mode == "bad" then return {} end
        return nil
    end,
}
