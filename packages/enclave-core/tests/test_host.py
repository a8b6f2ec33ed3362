"""enclave-host: how its command line reaches each component, and that a component whose loop is blocked does
not hold back a neighbour's (each runs on a loop and thread of its own)."""

from __future__ import annotations

import argparse
import asyncio
import threading
import time
from pathlib import Path
from types import ModuleType

import pytest

from enclave_core.runtime import component, looplag
from enclave_core.runtime.host import CONTROLLERS, Hosted, Plan, component_args, host, load, parse_args
from enclave_testing.processes import free_port
from enclave_testing.waiting import poll


def test_flags_are_routed_to_one_component_or_to_all() -> None:
    plan = parse_args(
        [
            "--components=config,tenants",
            "--namespace=home",
            "--tenants:grpc-address=0.0.0.0:9091",
            "--config:resync",
            "5s",
            "--lease-duration",
            "6",
            "--probe-address=0.0.0.0:8090",
        ]
    )
    assert plan.args.components == ["config", "tenants"]
    assert plan.args.probe_address == "0.0.0.0:8090"
    assert plan.argv == {
        "config": ["--namespace=home", "--lease-duration", "6", "--resync", "5s"],
        "tenants": ["--namespace=home", "--lease-duration", "6", "--grpc-address=0.0.0.0:9091"],
    }


@pytest.mark.parametrize(
    "argv",
    [
        ["--components=config,admission"],
        ["--components=config,config"],
        ["--components="],
        ["--components=config", "--tenants:resync=5s"],
    ],
)
def test_what_cannot_be_hosted_is_refused(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_args(argv)
    assert exited.value.code == 2


def test_every_controller_is_found_by_name() -> None:
    for name in CONTROLLERS:
        module = load(name)
        assert callable(module.parse_args), name
        assert callable(module.body), name


def _kubeconfig(tmp_path: Path) -> str:
    """A kubeconfig the frame parses; nothing here talks to its server (no leader election, no informers)."""
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    return str(path)


def _module(name: str, body: component.Body) -> ModuleType:
    module = ModuleType(name)
    module.body = body  # type: ignore[attr-defined]
    return module


def _args(kubeconfig: str) -> argparse.Namespace:
    return argparse.Namespace(
        probe_address=f"127.0.0.1:{free_port()}", kubeconfig=kubeconfig, leader_elect=False, namespace="x"
    )


def _lags_over(name: str, bound: float) -> float:
    """How many of ``name``'s loop-lag samples so far were above ``bound`` seconds (a bucket boundary)."""
    buckets = {
        sample.labels["le"]: sample.value
        for metric in looplag.LAG.collect()
        for sample in metric.samples
        if sample.name.endswith("_bucket") and sample.labels.get("component") == name
    }
    return buckets.get("+Inf", 0.0) - buckets.get(str(bound), 0.0)


def test_a_blocked_loop_does_not_stall_its_neighbour(tmp_path: Path) -> None:
    """One hosted component blocks its loop for 1 s at a time (as a long computation would); the other's loop
    keeps waking on time. In one shared loop every wake-up of the neighbour would be ~1 s late."""
    stalls = 4

    async def stalling(process: component.Component) -> None:
        for _ in range(stalls):
            time.sleep(1.0)  # noqa: ASYNC251 - the stall under test
            await asyncio.sleep(0.5)  # the loop runs between stalls, so each is sampled on its own
        await asyncio.Event().wait()

    async def steady(process: component.Component) -> None:
        await asyncio.Event().wait()

    kubeconfig = _kubeconfig(tmp_path)
    plan = Plan(argparse.Namespace(probe_address=f"127.0.0.1:{free_port()}", gc_thresholds=(700, 10, 10)), {})
    hosted = [
        Hosted("stall-test-blocked", _module("blocked", stalling), _args(kubeconfig), None),
        Hosted("stall-test-steady", _module("steady", steady), _args(kubeconfig), None),
    ]
    stop = threading.Event()
    result: list[int] = []

    def run() -> None:
        async def main() -> None:
            stopping = asyncio.Event()
            loop = asyncio.get_running_loop()
            threading.Thread(target=lambda: (stop.wait(), loop.call_soon_threadsafe(stopping.set)), daemon=True).start()
            result.append(await host(plan, hosted, stopping))

        asyncio.run(main())

    runner = threading.Thread(target=run)
    runner.start()
    try:
        poll(lambda: _lags_over("stall-test-blocked", 0.5) >= stalls, timeout=60, what="the stalls measured")
    finally:
        stop.set()
        runner.join(30)
    assert result == [0], "the host stops cleanly when asked"
    assert _lags_over("stall-test-steady", 0.25) == 0, "the neighbour's loop never woke a quarter second late"


def test_hosted_components_follow_the_hosted_config_unless_told_otherwise() -> None:
    ports = {"config": (8101, 9101), "tenants": (8102, 9102), "pools": (8103, 9103)}
    argv = ["--components=config,tenants,pools", "--probe-address=127.0.0.1:8100", "--pools:config-endpoint=x:1"]
    for name, (probe, grpc) in ports.items():
        argv += [f"--{name}:probe-address=127.0.0.1:{probe}", f"--{name}:grpc-address=127.0.0.1:{grpc}"]
    parsed = component_args(parse_args(argv))
    assert parsed["tenants"].config_endpoint == "localhost:9101"
    assert parsed["pools"].config_endpoint == "x:1"


def test_two_hosted_listeners_on_one_port_are_refused_before_anything_starts() -> None:
    # enclave-pools' and enclave-replication's default probe ports are the same (8085)
    plan = parse_args(["--components=pools,replication", "--pools:grpc-address=127.0.0.1:9103"])
    with pytest.raises(SystemExit) as exited:
        component_args(plan)
    assert "--replication:probe-address uses port 8085, as --pools:probe-address does" in str(exited.value)
