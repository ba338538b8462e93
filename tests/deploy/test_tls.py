"""TLS to a real scheduler: certificates generated here, `dask scheduler` + `dask worker` started with --tls-*.

The CLI (in-process) reaches it only with ``--tls-ca/--tls-cert/--tls-key`` (or ``DCLUST_TLS_*``) and a ``tls://``
address;
the fitted model equals the one of the embedded local cluster.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
from pathlib import Path

import dask
import numpy as np
import pytest

import dclust
from dclust._cli._cluster import dask_client, security
from dclust.errors import InvalidParameterError
from _support.processes import dask_processes

x509 = pytest.importorskip("cryptography.x509")
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID  # noqa: E402


def _write_pem(path: Path, cert, key) -> tuple[str, str]:
    path.with_suffix(".pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    path.with_suffix(".key").write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                                           serialization.PrivateFormat.PKCS8,
                                                           serialization.NoEncryption()))
    return str(path.with_suffix(".pem")), str(path.with_suffix(".key"))


def _cert(name: str, issuer_cert, issuer_key, *, ca: bool = False):
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer_cert.subject if issuer_cert is not None else subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if not ca:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        ).add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
        )
    cert = builder.sign(issuer_key if issuer_key is not None else key, hashes.SHA256())
    return cert, key


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A CA, a node certificate (scheduler and worker) and a client certificate; plus a foreign CA."""
    d = tmp_path_factory.mktemp("pki")
    ca_cert, ca_key = _cert("dclust test CA", None, None, ca=True)
    ca, _ = _write_pem(d / "ca", ca_cert, ca_key)
    node = _write_pem(d / "node", *_cert("127.0.0.1", ca_cert, ca_key))
    client = _write_pem(d / "client", *_cert("dclust client", ca_cert, ca_key))
    other_cert, other_key = _cert("someone else's CA", None, None, ca=True)
    other_ca, _ = _write_pem(d / "other-ca", other_cert, other_key)
    return {"ca": ca, "node": node, "client": client, "other_ca": other_ca}


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory, pki):
    """A TLS-only scheduler and one single-threaded worker, both real processes on 127.0.0.1; always stopped."""
    from distributed.security import Security

    tls = ["--tls-ca-file", pki["ca"], "--tls-cert", pki["node"][0], "--tls-key", pki["node"][1]]
    sec = Security(tls_ca_file=pki["ca"], tls_client_cert=pki["client"][0], tls_client_key=pki["client"][1],
                   require_encryption=True)
    with dask_processes(tmp_path_factory.mktemp("tls-cluster"), 1, scheduler_args=["--protocol", "tls", *tls],
                        worker_args=tls, security=sec) as (address, _):
        assert address.startswith("tls://")
        yield address


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    rng = np.random.default_rng(3)
    X = (rng.uniform(-10, 10, size=(4, 3))[rng.integers(0, 4, 4_000)] + rng.normal(size=(4_000, 3))).astype(np.float32)
    path = tmp_path_factory.mktemp("tls-data") / "points.zarr"
    dclust.write_array(X, path, chunks=1_000)
    return path


def _cli(*args: str, env: dict | None = None):
    """The CLI in-process (a fresh interpreter costs ~10 s of imports on this machine)."""
    from typer.testing import CliRunner

    from dclust._cli.main import app

    return CliRunner().invoke(app, [*args, "--json", "--quiet"], env=env)


_NO_TLS_ENV = {"DCLUST_TLS_CA": None, "DCLUST_TLS_CERT": None, "DCLUST_TLS_KEY": None, "DCLUST_SCHEDULER": None}


def test_cli_over_tls_gives_the_in_memory_model(tls_cluster, pki, store, tmp_path):
    tls = ["--tls-ca", pki["ca"], "--tls-cert", pki["client"][0], "--tls-key", pki["client"][1]]
    out = _cli("fit", "kmeans", str(store), "--k", "4", "--seed", "0", "--labels", str(tmp_path / "labels.zarr"),
               "--model", str(tmp_path / "tls.zarr"), "--scheduler", tls_cluster, *tls, env=_NO_TLS_ENV)
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["scheduler"] == tls_cluster
    remote = dclust.load(tmp_path / "tls.zarr")
    with dask.config.set(scheduler="threads"):
        ref = type(remote)(**remote.get_params()).fit(dclust.open_array(store))
    np.testing.assert_allclose(remote.cluster_centers_, ref.cluster_centers_, rtol=1e-10)
    # the environment variables work too (here for predict, the scheduler from DCLUST_SCHEDULER)
    env = {"DCLUST_SCHEDULER": tls_cluster, "DCLUST_TLS_CA": pki["ca"], "DCLUST_TLS_CERT": pki["client"][0],
           "DCLUST_TLS_KEY": pki["client"][1]}
    pred = _cli("predict", str(tmp_path / "tls.zarr"), str(store), "--labels", str(tmp_path / "p.zarr"), env=env)
    assert pred.exit_code == 0, pred.output
    assert json.loads(pred.stdout)["scheduler"] == tls_cluster
    np.testing.assert_array_equal(dclust.open_array(tmp_path / "p.zarr").compute(),
                                  dclust.open_array(tmp_path / "labels.zarr").compute())


def test_without_the_right_certificates_the_scheduler_is_not_reached(tls_cluster, pki, monkeypatch):
    for name in _NO_TLS_ENV:
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(InvalidParameterError, match="without TLS files"):  # no TLS at all
        with dask_client(tls_cluster, timeout=3):
            pass
    with pytest.raises(OSError, match="cannot reach"):  # a CA that did not sign the scheduler's certificate
        with dask_client(tls_cluster, timeout=3, tls_ca=pki["other_ca"], tls_cert=pki["client"][0],
                         tls_key=pki["client"][1]):
            pass


def test_incomplete_tls_options_are_a_usage_error_before_anything_runs(tmp_path, store):
    out = _cli("fit", "kmeans", str(store), "--k", "4", "--labels", str(tmp_path / "l.zarr"), "--model",
               str(tmp_path / "m.zarr"), "--scheduler", "tls://127.0.0.1:1", "--tls-ca", str(store),
               env=_NO_TLS_ENV)
    assert out.exit_code == 2 and "--tls-cert" in out.output
    assert os.listdir(tmp_path) == []


def test_security_rules(pki, monkeypatch):
    for name in ("DCLUST_TLS_CA", "DCLUST_TLS_CERT", "DCLUST_TLS_KEY"):
        monkeypatch.delenv(name, raising=False)
    assert security("tcp://127.0.0.1:8786") is None
    files = (pki["ca"], *pki["client"])
    sec = security("tls://127.0.0.1:8786", *files)
    assert sec.require_encryption and sec.tls_ca_file == pki["ca"] and sec.tls_client_key == pki["client"][1]
    with pytest.raises(InvalidParameterError, match="tls://127.0.0.1:8786"):
        security("tcp://127.0.0.1:8786", *files)
    with pytest.raises(InvalidParameterError, match="no scheduler address"):
        security(None, *files)
    with pytest.raises(InvalidParameterError, match="existing PEM file"):
        security("tls://127.0.0.1:8786", pki["ca"] + ".missing", *pki["client"])
    monkeypatch.setenv("DCLUST_TLS_CA", pki["ca"])
    with pytest.raises(InvalidParameterError, match="--tls-cert, --tls-key"):
        security("tls://127.0.0.1:8786")
