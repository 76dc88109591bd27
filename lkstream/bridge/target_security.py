"""How the bridge proves itself to the target Kafka cluster: TLS and SASL, as aiokafka's settings.

::

    KafkaSecurity(protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512",
                  username="bridge", password="...", ca_file="/etc/kafka/ca.pem")

``protocol`` is Kafka's ``security.protocol``: ``PLAINTEXT`` (the default), ``SSL``,
``SASL_PLAINTEXT`` or ``SASL_SSL``. SASL takes ``PLAIN``, ``SCRAM-SHA-256`` or
``SCRAM-SHA-512`` with a user name and a password; TLS trusts ``ca_file`` (the system's
CAs without one) and may present a client certificate (``cert_file``/``key_file``).
:meth:`KafkaSecurity.client_options` gives the keyword arguments of aiokafka's producer
and admin client. The password never appears in a ``repr``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final, Literal

from lkstream.errors import InvalidArgumentError
from lkstream.security.tls import ClientTls

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS: Final = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


@dataclass(frozen=True)
class KafkaSecurity:
    """TLS and SASL settings towards the target cluster (see the module docstring)."""

    protocol: SecurityProtocol = "PLAINTEXT"
    sasl_mechanism: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise InvalidArgumentError(f"Kafka security protocol must be one of {', '.join(PROTOCOLS)}")
        sasl = self.protocol.startswith("SASL_")
        if sasl and (self.sasl_mechanism not in SASL_MECHANISMS or not self.username or not self.password):
            raise InvalidArgumentError(
                f"{self.protocol} needs a SASL mechanism ({', '.join(SASL_MECHANISMS)}), a user name and a password"
            )
        if not sasl and (self.sasl_mechanism or self.username or self.password):
            raise InvalidArgumentError(
                f"a SASL mechanism, user or password needs SASL_SSL or SASL_PLAINTEXT, not {self.protocol}"
            )
        if not self.tls and (self.ca_file or self.cert_file or self.key_file):
            raise InvalidArgumentError(f"TLS files need SSL or SASL_SSL, not {self.protocol}")

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    def client_options(self) -> dict[str, Any]:
        """Keyword arguments for ``AIOKafkaProducer`` and ``AIOKafkaAdminClient``."""
        options: dict[str, Any] = {"security_protocol": self.protocol}
        if self.tls:
            options["ssl_context"] = ClientTls(self.ca_file, self.cert_file, self.key_file).ssl_context()
        if self.sasl_mechanism is not None:
            options.update(
                sasl_mechanism=self.sasl_mechanism,
                sasl_plain_username=self.username,
                sasl_plain_password=self.password,
            )
        return options
