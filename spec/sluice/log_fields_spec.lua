-- sluice.log_fields built against a stubbed sluice module: the fields whose values are
-- computed here (not read from the core) for chosen inputs.
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path

describe("sluice.log_fields", function()
    local saved_sluice, saved_fields, clock
    local log_fields
    setup(function()
        saved_sluice, saved_fields = package.loaded["sluice"], package.loaded["sluice.log_fields"]
        package.loaded["sluice"] = {
            time = { now = function() return clock end },
            request = { get_stats = function() return { duration_ms = 1.23456 } end },
        }
        package.loaded["sluice.log_fields"] = nil
        log_fields = require("sluice.log_fields")
    end)
    teardown(function()
        package.loaded["sluice"], package.loaded["sluice.log_fields"] = saved_sluice, saved_fields
    end)

    local function ts(now)
        clock = now
        return log_fields.build({ "ts" }, {}).ts
    end

    it("writes ts with milliseconds, truncated", function()
        assert.equal("1970-01-01T00:01:40.000Z", ts(100))
        assert.equal("1970-01-01T00:01:40.250Z", ts(100.25))
        assert.equal("1970-01-01T00:01:40.123Z", ts(100.1239))
    end)

    it("never writes a ts a second early when the milliseconds round up", function()
        -- 100.9996 once gave "...:40.000Z" (the fraction rounded to 1.000, the second kept)
        assert.equal("1970-01-01T00:01:40.999Z", ts(100.9996))
        assert.equal("1970-01-01T00:01:40.999Z", ts(100.99999999))
        assert.equal("2024-05-01T12:00:00.999Z", ts(1714564800.9999))
    end)

    it("keeps ts in order across a second boundary", function()
        local prev
        for i = 0, 40 do
            local t = ts(1714564800.99 + i * 0.00025)
            if prev then assert.is_true(t >= prev, t .. " after " .. prev) end
            prev = t
        end
    end)
end)
