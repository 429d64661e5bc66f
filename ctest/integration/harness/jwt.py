"""JWTs for the auth tests: HS256 with Python's hmac, EdDSA keys and signatures made by the
openssl CLI (a real, independent signer)."""

import base64
import hashlib
import hmac
import json
import os
import subprocess


def b64u(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def hs256(claims, secret):
    signing = b64u(json.dumps({"alg": "HS256", "typ": "JWT"}).encode()) + "." + b64u(json.dumps(claims).encode())
    mac = hmac.new(secret.encode(), signing.encode(), hashlib.sha256).digest()
    return signing + "." + b64u(mac)


def _openssl(d, *args):
    subprocess.run(["openssl"] + list(args), cwd=d, check=True, capture_output=True)


def ed25519_key(d, name):
    """An Ed25519 key made by openssl in folder d (NAME.pem); returns its public JWK (x
    from the SPKI DER tail, kid NAME)."""
    _openssl(d, "genpkey", "-algorithm", "ED25519", "-out", name + ".pem")
    _openssl(d, "pkey", "-in", name + ".pem", "-pubout", "-outform", "DER", "-out", name + ".der")
    with open(os.path.join(d, name + ".der"), "rb") as f:
        return {"kty": "OKP", "crv": "Ed25519", "kid": name, "x": b64u(f.read()[-32:])}


def eddsa(d, name, claims):
    """A token signed by openssl with the key ed25519_key(d, name) made."""
    signing = b64u(json.dumps({"alg": "EdDSA", "kid": name}).encode()) + "." + b64u(json.dumps(claims).encode())
    with open(os.path.join(d, "in-%s.txt" % name), "w") as f:
        f.write(signing)
    _openssl(d, "pkeyutl", "-sign", "-inkey", name + ".pem", "-rawin", "-in", "in-%s.txt" % name,
             "-out", "sig-%s.bin" % name)
    with open(os.path.join(d, "sig-%s.bin" % name), "rb") as f:
        return signing + "." + b64u(f.read())
