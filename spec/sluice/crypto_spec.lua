-- sluice.crypto against known answers (FIPS 180 / RFC 4231 / RFC 4648 test vectors).
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
local crypto = require("sluice.crypto")

local function hex(s) return (s:gsub(".", function(c) return ("%02x"):format(c:byte()) end)) end

describe("sluice.crypto", function()
    it("digests: SHA-256/384/512 of 'abc'", function()
        assert.equal("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", hex(crypto.sha256("abc")))
        assert.equal("cb00753f45a35e8bb5a03d699ac65007272c32ab0eded1631a8b605a43ff5bed8086072ba1e7cc2358baeca134c825a7",
                     hex(crypto.digest("sha384", "abc")))
        assert.equal(128, #hex(crypto.digest("sha512", "abc")))
        assert.has_error(function() crypto.digest("md4", "x") end)
    end)

    it("HMAC-SHA256, RFC 4231 test case 2", function()
        assert.equal("5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843",
                     hex(crypto.hmac("sha256", "Jefe", "what do ya want for nothing?")))
    end)

    it("base64url round-trips every length and rejects bad input", function()
        for n = 0, 40 do
            local s = ""
            for i = 1, n do s = s .. string.char((i * 37 + n) % 256) end
            local e = crypto.base64url_encode(s)
            assert.is_nil(e:find("[+/=]"))
            assert.equal(s, crypto.base64url_decode(e))
        end
        assert.equal("Zm9vYmFy", crypto.base64url_encode("foobar"))
        assert.equal("foob", crypto.base64url_decode("Zm9vYg"))
        assert.is_nil((crypto.base64url_decode("Zm9v+g")))
        assert.is_nil((crypto.base64url_decode("Z")))
    end)

    it("equal compares whole strings", function()
        assert.is_true(crypto.equal("secret", "secret"))
        assert.is_false(crypto.equal("secret", "secreT"))
        assert.is_false(crypto.equal("secret", "secrets"))
        assert.is_false(crypto.equal("secret", nil))
    end)
end)
