"""Password hashes: scrypt (``hashlib.scrypt``, the standard library; no bcrypt wheel is
pinned). etcd hashes with bcrypt at ``--bcrypt-cost`` (default 10); here the same flag
sets scrypt's work factor, N = 2 ** (cost + 4) (cost 10: N = 16384, r = 8, p = 1, 16 MiB,
tens of milliseconds). The stored form names its parameters, so a later cost change still
verifies old hashes: ``scrypt$<log2 N>$<r>$<p>$<salt hex>$<hash hex>``.

Hashing happens on the node that takes the request, before proposing (apply has no
randomness); verifying happens on the node that authenticates.

Users that arrived from etcd (``metaledger snapshot restore --from-etcd``) keep etcd's
bcrypt hashes (``$2a$<cost>$...``): those verify with bcrypt, until a new password is set.
"""

from __future__ import annotations

import hashlib
import hmac
import os

DEFAULT_COST = 10  # etcd's bcrypt.DefaultCost
MIN_COST, MAX_COST = 4, 16  # bcrypt's MinCost; scrypt memory stays below 64 MiB


def hash_password(password: str, cost: int = DEFAULT_COST) -> bytes:
    log_n, r, p = cost + 4, 8, 1
    salt = os.urandom(16)
    digest = hashlib.scrypt(
        password.encode(), salt=salt, n=1 << log_n, r=r, p=p, maxmem=1 << 26, dklen=32
    )
    return f"scrypt${log_n}${r}${p}${salt.hex()}${digest.hex()}".encode()


def check_password(stored: bytes, password: str) -> bool:
    """Whether ``password`` matches ``stored`` (False for anything not a hash of ours or
    etcd's bcrypt)."""
    if stored.startswith(BCRYPT_PREFIXES):
        return _check_bcrypt(stored, password)
    try:
        scheme, log_n, r, p, salt, digest = stored.decode().split("$")
        if scheme != "scrypt" or not MIN_COST + 4 <= int(log_n) <= MAX_COST + 4:
            return False
        got = hashlib.scrypt(
            password.encode(),
            salt=bytes.fromhex(salt),
            n=1 << int(log_n),
            r=int(r),
            p=int(p),
            maxmem=1 << 26,
            dklen=len(digest) // 2,
        )
    except (ValueError, UnicodeDecodeError):
        return False
    return hmac.compare_digest(got, bytes.fromhex(digest))


#: the prefixes of bcrypt hashes (etcd writes ``$2a$``; Go's bcrypt reads all three)
BCRYPT_PREFIXES = (b"$2a$", b"$2b$", b"$2y$")


def _check_bcrypt(stored: bytes, password: str) -> bool:
    """An etcd user's bcrypt hash, checked as etcd checks it (False if it does not parse)."""
    import bcrypt

    try:
        return bool(bcrypt.checkpw(password.encode(), stored))
    except ValueError:
        return False
