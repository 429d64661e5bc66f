-- sluice.files: config-named files resolve against the config file's folder and join the
-- generation's files (what the core hashes, reports as file:PATH and watches).
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
local files = require("sluice.files")

local function tmpdir()
    local d = os.tmpname()
    os.remove(d)
    assert(os.execute("mkdir -p " .. d .. "/keys"))
    return d
end

local function write(path, text)
    local f = assert(io.open(path, "wb"))
    f:write(text)
    f:close()
end

describe("sluice.files", function()
    local d
    before_each(function()
        d = tmpdir()
        write(d .. "/keys/a.json", "A")
        files.set_config_path(d .. "/sluice.yaml")
    end)
    after_each(function() os.execute("rm -rf " .. d) end)

    it("resolves a relative path against the config file's folder, not the working directory", function()
        assert.equal(d .. "/keys/a.json", files.resolve("keys/a.json"))
        assert.equal("/etc/x.json", files.resolve("/etc/x.json"))
    end)

    it("takes a relative path found only under the working directory from there", function()
        -- spec/sluice/files_spec.lua exists from the repository root, not under d
        assert.equal("spec/sluice/files_spec.lua", files.resolve("spec/sluice/files_spec.lua"))
    end)

    it("reads a file and notes it once, in first-use order", function()
        assert.equal("A", files.read("keys/a.json"))
        assert.equal(d .. "/keys/b.json", files.path("keys/b.json"))
        assert.equal("A", files.read(d .. "/keys/a.json"))
        assert.same({ d .. "/keys/a.json", d .. "/keys/b.json" }, (files.noted()))
    end)

    it("answers nil and an error for a file that cannot be read (still noted: it may appear)", function()
        local text, err = files.read("keys/missing.json")
        assert.is_nil(text)
        assert.matches("missing.json", err)
        assert.same({ d .. "/keys/missing.json" }, (files.noted()))
    end)

    it("resolves and notes every key ending in _file of a config, lists included", function()
        local conf = files.resolve_conf({ jwks_file = "keys/a.json", key_files = nil, users_file = { "u1", "u2" },
                                          path = "keys/a.json" })
        assert.equal(d .. "/keys/a.json", conf.jwks_file)
        assert.same({ d .. "/u1", d .. "/u2" }, conf.users_file)
        assert.equal("keys/a.json", conf.path) -- not a *_file key: left as written
        assert.same({ d .. "/keys/a.json", d .. "/u1", d .. "/u2" }, (files.noted()))
    end)

    it("reads a file once per config: a rotation after the first read is not seen", function()
        assert.equal("A", files.read("keys/a.json"))
        write(d .. "/keys/a.json", "A2")
        assert.equal("A", files.read("keys/a.json"))
        local _, texts = files.noted()
        assert.same({ [d .. "/keys/a.json"] = "A" }, texts)
        files.set_config_path(d .. "/sluice.yaml") -- the next config reads it again
        assert.equal("A2", files.read("keys/a.json"))
    end)

    it("answers a worker VM with the texts its generation's check read (set_texts), not the disk", function()
        write(d .. "/keys/a.json", "rotated since the check")
        files.set_texts({ [d .. "/keys/a.json"] = "A" })
        assert.equal("A", files.read("keys/a.json"))
        assert.equal("A", files.read(d .. "/keys/a.json"))
        write(d .. "/keys/b.json", "B") -- one the check did not read: from the disk
        assert.equal("B", files.read("keys/b.json"))
    end)

    it("starts a new list for each config (set_config_path)", function()
        files.path("keys/a.json")
        files.set_config_path("<embedded default>")
        assert.same({}, (files.noted()))
        assert.equal("keys/a.json", files.resolve("keys/a.json"))
    end)

    it("refuses a path that is not a non-empty string", function()
        assert.has_error(function() files.path("") end)
        assert.has_error(function() files.path(nil) end)
    end)
end)
