"""Test credentials made with the machine's own tools: certificates with the
openssl command, bcrypt hashes with the C library's crypt (libxcrypt)."""
import ctypes
import ctypes.util
import shutil
import subprocess


def bcrypt_hash(password, cost=5):
    """A bcrypt hash ($2b$), as `htpasswd -B` makes, from the C library's crypt (libxcrypt)."""
    name = ctypes.util.find_library("crypt")
    assert name, "libcrypt (libxcrypt, Debian's libcrypt1) not found: it makes the test user's bcrypt hash"
    lib = ctypes.CDLL(name)
    lib.crypt_gensalt.restype = ctypes.c_char_p
    lib.crypt_gensalt.argtypes = [ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p, ctypes.c_int]
    lib.crypt.restype = ctypes.c_char_p
    lib.crypt.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    salt = lib.crypt_gensalt(b"$2b$", cost, None, 0)
    hashed = lib.crypt(password.encode(), salt) if salt else None
    assert hashed and hashed.startswith(b"$2b$") and len(hashed) == 60, f"libcrypt made no bcrypt hash: {hashed!r}"
    return hashed.decode()


def openssl(pki, *args):
    assert shutil.which("openssl"), "openssl not found (apt-get install openssl; make setup)"
    p = subprocess.run(["openssl", *args], cwd=pki, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, f"openssl {' '.join(args)}: {p.stderr}"


def self_signed(pki, name, san=None):
    """openssl req -x509: a self-signed certificate name.crt (it is its own CA) and key name.key."""
    openssl(pki, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2",
            "-subj", f"/CN={name}", "-keyout", f"{name}.key", "-out", f"{name}.crt",
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,digitalSignature,keyCertSign",
            *(["-addext", f"subjectAltName={san}"] if san else []))


def signed_by(pki, name, ca, usage, san=None):
    """A leaf certificate name.crt for `usage` (serverAuth, clientAuth) signed by the CA `ca`."""
    openssl(pki, "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-subj", f"/CN={name}", "-keyout", f"{name}.key", "-out", f"{name}.csr")
    (pki / f"{name}.ext").write_text("basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n"
                                     f"extendedKeyUsage={usage}\nsubjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n"
                                     + (f"subjectAltName={san}\n" if san else ""))
    openssl(pki, "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key", "-CAcreateserial",
            "-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.crt")
