"""Node daemon configuration: validation names the key, and `python -m splitbrain.node` exits 2 on errors."""

from __future__ import annotations

import json
import socket

import pytest

from splitbrain.node.runtime.config import ConfigError, NodeConfig, load_config
from splitbrain.node.runtime.testing import NodeProcess, free_port, run_python_m_node, unique_host


def base(**over) -> dict:
    cfg = {"name": "A", "bind": "127.0.0.2:7800", "admin": "127.0.0.2:8800", "event_log": False}
    cfg.update(over)
    return cfg


def error_key(raw: dict, env: dict | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        NodeConfig.from_dict(raw, env or {})
    return info.value.key


# ---- in-process validation --------------------------------------------------------------------


def test_minimal_config_gets_defaults():
    """A config with only the required keys gets the documented defaults."""
    cfg = NodeConfig.from_dict(base(), {})
    assert cfg.transport == "udp" and cfg.protocol == "unicast3"
    assert cfg.bundling is True and cfg.bundle_max_bytes == 60_000
    assert cfg.incarnation == 0 and cfg.epoch is None and cfg.admin_token is None
    assert cfg.peers == {} and cfg.config == {}


@pytest.mark.parametrize(
    "raw, key",
    [
        (base(colour="blue"), "colour"),
        ({"bind": "127.0.0.2:1", "admin": "127.0.0.2:2", "event_log": False}, "name"),
        (base(bind=None), "bind"),
        (base(name=7), "name"),
        (base(name="a:b"), "name"),
        (base(bind="127.0.0.2"), "bind"),
        (base(bind="127.0.0.2:99999"), "bind"),
        (base(admin="127.0.0.2:http"), "admin"),
        (base(admin=8800), "admin"),
        (base(transport="sctp"), "transport"),
        (base(protocol="unicast9"), "protocol"),
        (base(peers=["B"]), "peers"),
        (base(peers={"B": "127.0.0.3"}), "peers.B"),
        (base(peers={"B": "127.0.0.3:0"}), "peers.B"),
        (base(peers={"A": "127.0.0.3:7800"}), "peers.A"),
        (base(config={"xmit_interval": 0}), "config.xmit_interval"),
        (base(config={"xmit_interval": "fast"}), "config.xmit_interval"),
        (base(config={"no_such_setting": 1}), "config.no_such_setting"),
        (base(config={"resync": "never"}), "config.resync"),
        (base(config=[1]), "config"),
        (base(event_log=True), "events"),
        (base(event_log="yes"), "event_log"),
        (base(incarnation=-1), "incarnation"),
        (base(incarnation=1.5), "incarnation"),
        (base(seed="x"), "seed"),
        (base(epoch=-5), "epoch"),
        (base(epoch=4e10), "epoch"),
        (base(epoch=True), "epoch"),
        (base(admin_token=""), "admin_token"),
        (base(admin_open="yes"), "admin_open"),
        (base(bundling=1), "bundling"),
        (base(bundle_max_bytes=10), "bundle_max_bytes"),
        (base(bundle_max_bytes=70_000), "bundle_max_bytes"),
        (base(bundle_max_bytes=60_000.0), "bundle_max_bytes"),
    ],
)
def test_errors_name_the_key(raw, key):
    """Every kind of bad value is refused with an error naming its key."""
    assert error_key(raw) == key


@pytest.mark.parametrize(
    "admin",
    ["0.0.0.0:7900", "192.0.2.7:7900", "[::]:7900", "[::ffff:10.1.2.3]:7900", "node-a:7900", "localhost.example:7900"],
)
def test_non_loopback_admin_needs_a_token(admin):
    """An admin API others can reach is refused without admin_token, the error naming that key."""
    with pytest.raises(ConfigError) as info:
        NodeConfig.from_dict(base(admin=admin), {})
    assert info.value.key == "admin_token" and "admin_open" in info.value.message


@pytest.mark.parametrize(
    "admin",
    ["127.0.0.2:8800", "127.255.3.4:0", "[::1]:8800", "localhost:8800", "LocalHost:8800", "[::ffff:127.0.0.1]:8800"],
)
def test_loopback_admin_needs_no_token(admin):
    """Only this host reaches a loopback admin API: no token needed."""
    assert NodeConfig.from_dict(base(admin=admin), {}).admin_token is None


def test_token_or_admin_open_allow_a_non_loopback_admin():
    """A token (from the file or SPLITBRAIN_ADMIN_TOKEN), or admin_open: true, lets the node listen anywhere."""
    assert NodeConfig.from_dict(base(admin="0.0.0.0:7900", admin_token="s3cret"), {}).admin_token == "s3cret"
    env = {"SPLITBRAIN_ADMIN": "0.0.0.0:7900", "SPLITBRAIN_ADMIN_TOKEN": "s3cret"}
    assert NodeConfig.from_dict(base(), env).admin_token == "s3cret"
    cfg = NodeConfig.from_dict(base(admin="0.0.0.0:7900"), {"SPLITBRAIN_ADMIN_OPEN": "true"})
    assert cfg.admin_open is True and cfg.admin_token is None
    assert NodeConfig.from_dict(base(), {}).admin_open is False


def test_tcp_allows_larger_bundles():
    """Over TCP a bundle may exceed a datagram (up to 1 MB)."""
    assert NodeConfig.from_dict(base(transport="tcp", bundle_max_bytes=500_000), {}).bundle_max_bytes == 500_000
    assert error_key(base(transport="tcp", bundle_max_bytes=2_000_000)) == "bundle_max_bytes"


def test_environment_overrides(tmp_path):
    """SPLITBRAIN_<KEY> overrides top-level keys and SPLITBRAIN_CONFIG_<SETTING> protocol settings."""
    path = tmp_path / "node.yaml"
    path.write_text(
        "name: A\nbind: 127.0.0.2:7800\nadmin: 127.0.0.2:8800\nevent_log: false\n"
        "config: {xmit_interval: 0.5, resync: sync}\n"
    )
    env = {
        "SPLITBRAIN_BIND": "127.0.0.9:7801",
        "SPLITBRAIN_INCARNATION": "3",
        "SPLITBRAIN_CONFIG_XMIT_INTERVAL": "0.2",
        "SPLITBRAIN_PEERS": "B=127.0.0.3:7800,C=127.0.0.4:7800",
        "SPLITBRAIN_ADMIN_TOKEN": "s3cret",
        "SPLITBRAIN_BUNDLING": "false",
        "OTHER": "x",
    }
    cfg = load_config(path, env)
    assert str(cfg.bind) == "127.0.0.9:7801"
    assert cfg.incarnation == 3
    assert cfg.config == {"xmit_interval": 0.2, "resync": "sync"}
    assert {k: str(v) for k, v in cfg.peers.items()} == {"B": "127.0.0.3:7800", "C": "127.0.0.4:7800"}
    assert cfg.admin_token == "s3cret" and cfg.bundling is False


def test_environment_errors_name_the_key(tmp_path):
    """A bad value from the environment names the key it overrides."""
    path = tmp_path / "node.yaml"
    path.write_text("name: A\nbind: 127.0.0.2:7800\nadmin: 127.0.0.2:8800\nevent_log: false\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, {"SPLITBRAIN_CONFIG_XMIT_INTERVAL": "-1"})
    assert info.value.key == "config.xmit_interval"
    with pytest.raises(ConfigError) as info:
        load_config(path, {"SPLITBRAIN_INCARNATION": "many"})
    assert info.value.key == "incarnation"


def test_toml_and_yaml_files_are_equivalent(tmp_path):
    """The same configuration reads the same from YAML and TOML."""
    yml = tmp_path / "n.yaml"
    yml.write_text(
        "name: A\nbind: 127.0.0.2:7800\nadmin: 127.0.0.2:8800\nevent_log: false\n"
        "peers: {B: 127.0.0.3:7800}\nconfig: {xmit_interval: 0.25}\n"
    )
    tml = tmp_path / "n.toml"
    tml.write_text(
        'name = "A"\nbind = "127.0.0.2:7800"\nadmin = "127.0.0.2:8800"\nevent_log = false\n'
        '[peers]\nB = "127.0.0.3:7800"\n[config]\nxmit_interval = 0.25\n'
    )
    assert load_config(yml, {}) == load_config(tml, {})


def test_unreadable_or_unknown_file_type(tmp_path):
    """A missing file, a file of another type and broken YAML are errors about --config."""
    for path in (tmp_path / "missing.yaml", tmp_path / "x.json"):
        if path.suffix == ".json":
            path.write_text("{}")
        with pytest.raises(ConfigError) as info:
            load_config(path, {})
        assert info.value.key == "--config"
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(ConfigError) as info:
        load_config(bad, {})
    assert info.value.key == "--config"


# ---- as a process: exit code 2 and a message naming the key ------------------------------------


def write(tmp_path, cfg: dict, name: str = "node.yaml"):
    path = tmp_path / name
    path.write_text(json.dumps(cfg))  # JSON is YAML
    return path


@pytest.mark.parametrize(
    "over, key",
    [
        ({"colour": "blue"}, "colour"),
        ({"incarnation": "one"}, "incarnation"),
        ({"bind": "localhost"}, "bind"),
        ({"config": {"xmit_interval": -1}}, "config.xmit_interval"),
        ({"admin": "0.0.0.0:0"}, "admin_token"),
    ],
)
def test_python_m_node_exits_2_naming_the_key(tmp_path, over, key):
    """`python -m splitbrain.node` stops with exit code 2 and names the bad key."""
    host = unique_host()
    cfg = {"name": "A", "bind": f"{host}:{free_port(host)}", "admin": f"{host}:0", "event_log": False, **over}
    proc = run_python_m_node(["--config", str(write(tmp_path, cfg))])
    assert proc.returncode == 2, proc.stderr
    assert f"{key}:" in proc.stderr


@pytest.mark.parametrize("transport, kind", [("udp", socket.SOCK_DGRAM), ("tcp", socket.SOCK_STREAM)])
def test_protocol_port_in_use_exits_2_naming_bind(tmp_path, transport, kind):
    """A protocol port that is taken stops the node with exit 2 and names `bind`."""
    host = unique_host()
    with socket.socket(socket.AF_INET, kind) as taken:
        taken.bind((host, 0))
        if kind == socket.SOCK_STREAM:
            taken.listen()
        port = taken.getsockname()[1]
        cfg = {"name": "A", "bind": f"{host}:{port}", "admin": f"{host}:0", "transport": transport, "event_log": False}
        proc = run_python_m_node(["--config", str(write(tmp_path, cfg))])
    assert proc.returncode == 2, proc.stderr
    assert "bind:" in proc.stderr and "in use" in proc.stderr


def test_admin_port_in_use_exits_2_naming_admin(tmp_path):
    """An admin port that is taken stops the node with exit 2 and names `admin`."""
    host = unique_host()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind((host, 0))
        taken.listen()
        port = taken.getsockname()[1]
        cfg = {"name": "A", "bind": f"{host}:{free_port(host)}", "admin": f"{host}:{port}", "event_log": False}
        proc = run_python_m_node(["--config", str(write(tmp_path, cfg))])
    assert proc.returncode == 2, proc.stderr
    assert "admin:" in proc.stderr


def test_unbindable_address_exits_2(tmp_path):
    """An address this host does not have is refused at bind time, naming `bind`."""
    cfg = {"name": "A", "bind": "192.0.2.1:7800", "admin": "127.0.0.2:0", "event_log": False}
    proc = run_python_m_node(["--config", str(write(tmp_path, cfg))])
    assert proc.returncode == 2, proc.stderr
    assert "bind:" in proc.stderr


def test_environment_override_error_exits_2(tmp_path):
    """A bad SPLITBRAIN_* variable stops the node with exit 2 naming the key."""
    host = unique_host()
    cfg = {"name": "A", "bind": f"{host}:{free_port(host)}", "admin": f"{host}:0", "event_log": False}
    import os

    env = dict(os.environ, SPLITBRAIN_CONFIG_ACK_THRESHOLD="0")
    proc = run_python_m_node(["--config", str(write(tmp_path, cfg))], env=env)
    assert proc.returncode == 2
    assert "config.ack_threshold:" in proc.stderr


def test_check_prints_resolved_config(tmp_path):
    """--check validates and prints the resolved configuration without starting."""
    cfg = {
        "name": "A",
        "bind": "127.0.0.2:7800",
        "admin": "127.0.0.2:8800",
        "event_log": False,
        "admin_token": "secret",
    }
    proc = run_python_m_node(["--config", str(write(tmp_path, cfg)), "--check"])
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["name"] == "A" and out["admin_token"] == "***" and out["bundle_max_bytes"] == 60_000


def test_token_is_enforced_on_a_wildcard_admin(tmp_path):
    """A node with a token on 0.0.0.0 answers GET to anyone and a mutating request without the header with 401."""
    host = unique_host()
    cfg = {
        "name": "A",
        "bind": f"{host}:{free_port(host)}",
        "admin": "0.0.0.0:0",
        "event_log": False,
        "admin_token": "s3cret",
    }
    with NodeProcess(cfg, workdir=tmp_path) as node:
        admin = node.client()
        assert admin.request("GET", "/health", token=False)[1]["node"] == "A"
        assert admin.request("POST", "/view", {"members": ["A"]}, token=False)[0] == 401
        assert admin.request("POST", "/view", {"members": ["A"]}, token="wrong")[0] == 401
        assert admin.request("POST", "/view", {"members": ["A"]})[0] == 200


def test_admin_open_starts_without_a_token_and_warns(tmp_path):
    """admin_open: true is the named opt-out: the node starts open on 0.0.0.0 and says so on stderr."""
    host = unique_host()
    cfg = {
        "name": "A",
        "bind": f"{host}:{free_port(host)}",
        "admin": "0.0.0.0:0",
        "event_log": False,
        "admin_open": True,
    }
    with NodeProcess(cfg, workdir=tmp_path) as node:
        assert node.client().request("POST", "/view", {"members": ["A"]})[0] == 200
    assert "has no admin_token (admin_open: true)" in node.stderr_tail()


def test_bad_flag_exits_2():
    """An unknown command-line flag is bad input too."""
    assert run_python_m_node(["--no-such-flag"]).returncode == 2


def test_addresses_parse_ipv4_ipv6_and_names():
    """host:port in its three spellings; the printed form reads back the same."""
    from splitbrain.node.runtime.config import parse_address

    for text, host, port in (
        ("127.0.0.2:7800", "127.0.0.2", 7800),
        ("[::1]:9", "::1", 9),
        ("node-a.local:0", "node-a.local", 0),
    ):
        addr = parse_address("bind", text)
        assert (addr.host, addr.port) == (host, port)
        assert parse_address("bind", str(addr)) == addr
    for bad in ("::1:80", "[::1]80", ":80", "host:", "ho st:80", "a..b:80"):
        with pytest.raises(ConfigError) as info:
            parse_address("peers.B", bad)
        assert info.value.key == "peers.B"
