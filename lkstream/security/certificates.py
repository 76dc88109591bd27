"""Server certificates that follow their files: rotate a certificate without restarting the daemon.

:class:`ServerCertificates` holds the certificate chain and key of every listener. It
hands out

* ``ssl.SSLContext`` objects for the asyncio listeners (HTTP, Kafka):
  :meth:`ServerCertificates.ssl_context`; a reload loads the new chain into each of them
  in place, so new connections get it and open ones keep theirs;
* the PEM bytes and a :attr:`~ServerCertificates.version` for gRPC, whose dynamic
  credentials ask on every new connection whether the version moved.

:meth:`ServerCertificates.check` looks at the certificate and key files (inode, size,
timestamps) and reloads when they changed. The daemon calls it every
``security_reload_interval_ms`` and at once on SIGHUP, on the event loop that runs the
asyncio listeners (a context must not change under a handshake in another thread).

A rotation writes two files, so a check may see a new certificate with the old key. The
pair is read once and validated in a fresh context first; only a pair that loads
together goes into the live contexts, loaded from the same bytes (memory files, never a
copy on disk). A pair that does not load is logged once and the previous one stays in
force; the next change of either file is tried again.

The client CA file (``tls_client_ca_file``) is read at start only: CA changes need a restart.
"""

from __future__ import annotations

import contextlib
import logging
import os
import ssl
import tempfile
import threading
from collections.abc import Iterator

from lkstream.errors import InvalidArgumentError
from lkstream.security.tls import ServerPem, ServerTls, load_chain

log = logging.getLogger("lkstream.security")

_Identity = tuple[tuple[int, int, int, int, int] | None, ...]


def _identity(*paths: str) -> _Identity:
    found: list[tuple[int, int, int, int, int] | None] = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            found.append(None)
            continue
        found.append((st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
    return tuple(found)


@contextlib.contextmanager
def _files_of(pem: ServerPem) -> Iterator[tuple[str, str]]:
    """Paths that read back ``pem``'s chain and key: memory files where the OS has them."""
    if hasattr(os, "memfd_create"):
        fds = [os.memfd_create(name, os.MFD_CLOEXEC) for name in ("lkstream-cert", "lkstream-key")]
        try:
            for fd, data in zip(fds, (pem.certificate_chain, pem.private_key), strict=True):
                os.write(fd, data)
            yield f"/proc/self/fd/{fds[0]}", f"/proc/self/fd/{fds[1]}"
        finally:
            for fd in fds:
                os.close(fd)
        return
    with tempfile.TemporaryDirectory(prefix="lkstream-tls-") as directory:  # mode 0700
        cert, key = os.path.join(directory, "cert.pem"), os.path.join(directory, "key.pem")
        for path, data in ((cert, pem.certificate_chain), (key, pem.private_key)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        yield cert, key


class ServerCertificates:
    """The listeners' TLS material, reloaded from its files by :meth:`check`. Thread-safe reads."""

    def __init__(self, tls: ServerTls) -> None:
        tls.check()  # at start a bad file is an error, not a log line
        self.tls = tls
        self._lock = threading.Lock()
        self._contexts: list[ssl.SSLContext] = []
        self._seen = self._files()
        self._failed: _Identity | None = None
        self._pem = tls.pem()
        #: Moves each time a new certificate is in force (gRPC's credentials compare it).
        self.version = 0

    def _files(self) -> _Identity:
        return _identity(self.tls.cert_file, self.tls.key_file)

    def ssl_context(self, *, client_certificate_optional: bool = False) -> ssl.SSLContext:
        """A server context (see :meth:`ServerTls.ssl_context`) that later reloads update in place."""
        context = self.tls.ssl_context(client_certificate_optional=client_certificate_optional)
        with self._lock:
            with _files_of(self._pem) as (cert, key):
                load_chain(context, cert, key)  # the pair in force, should the files have moved since start
            self._contexts.append(context)
        return context

    def pem(self) -> ServerPem:
        """The certificate chain and key in force (and the client CA read at start)."""
        with self._lock:
            return self._pem

    def check(self) -> bool:
        """Reload when the certificate or key file changed; True when a new pair is now in force."""
        seen = self._files()
        if seen in (self._seen, self._failed):
            return False
        loaded = ""
        try:
            fresh = ServerPem(
                certificate_chain=_read(self.tls.cert_file),
                private_key=_read(self.tls.key_file),
                client_ca=self._pem.client_ca,
            )
            with _files_of(fresh) as (cert, key):
                loaded = key
                load_chain(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER), cert, key)  # the pair loads together
                with self._lock:
                    for context in self._contexts:
                        load_chain(context, cert, key)
                    self._pem = fresh
                    self._seen = seen
                    self._failed = None
                    self.version += 1
        except InvalidArgumentError as exc:
            self._failed = seen
            reason = str(exc).split(f"with {loaded}: ", 1)[-1]
            log.error(
                "TLS certificate files changed but %s with %s do not load (%s); the previous certificate stays",
                self.tls.cert_file,
                self.tls.key_file,
                reason,
            )
            return False
        log.info("TLS certificate reloaded from %s", self.tls.cert_file)
        return True


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise InvalidArgumentError(f"cannot read {path}: {exc.strerror or exc}") from None
