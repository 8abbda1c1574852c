"""`assure doctor --cluster ADDRESS`: what a Ray cluster lacks to take assure's specs, checked
from the caller and, by a tiny task pinned to each node, on every node: Ray's version on both
sides, the address, the `docker` resource, and each node's engine, images and assure version.

A node task asks for no CPU and no `docker` slot, so a busy cluster still answers; one that
does not answer within `NODE_SECONDS` is reported, not waited for."""

from __future__ import annotations

import platform
import socket
from typing import Any

import assure
from assure.errors import AssureError
from assure.ops.doctor import Check, Report, Status
from assure.textsafe import display

NODE_SECONDS = 60  # for every node's task to answer (a worker started, the engine asked)
RAY_STOP = (
    "`ray stop` stops every Ray process on its host, whoever started it: on a shared host, stop a"
    " node by the process id its `ray start` printed instead"
)


def node_facts() -> dict[str, Any]:
    """Run on a node (a Ray task): what it has for assure, as plain values."""
    import ray

    facts: dict[str, Any] = {
        "ray": ray.__version__,
        "assure": assure.__version__,
        "python": platform.python_version(),
        "host": socket.gethostname(),
    }
    try:
        from assure.sandbox import registry

        backend = registry.create()
        facts["engine"] = backend.version().get("Version")
        facts["images"] = _image_tags(backend)
        facts["runtimes"] = sorted(backend.runtimes())
    except AssureError as exc:
        facts["engine_error"] = exc.explain()
    except Exception as exc:  # noqa: BLE001  (a node's fault is a finding, never the doctor's crash)
        facts["engine_error"] = f"{type(exc).__name__}: {exc}"
    return facts


def diagnose(address: str, local_images: list[str] | None) -> Report:
    """Every check of the cluster at `address`; `local_images`: the caller's own image tags
    (None: not built here), which each node's must equal, as the same checkout builds them."""
    report = Report()
    try:
        import ray
    except ImportError:
        report.add(
            "ray (caller)", False, "Ray is not installed here; fix: pip install 'assure[ray]'"
        )
        return report
    report.add("ray (caller)", True, f"ray {ray.__version__}, python {platform.python_version()}")
    from assure.run import cluster

    try:
        cluster.connect(address)
    except AssureError as exc:
        report.add("cluster address", False, exc.explain())
        return report
    try:
        report.add("cluster address", True, f"joined {display(address)}")
        _nodes(report, ray, local_images)
    finally:
        ray.shutdown()
    report.checks.append(Check("ray stop", Status.INFO, RAY_STOP, value="note"))
    return report


def _nodes(report: Report, ray: Any, local_images: list[str] | None) -> None:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from assure.run.cluster import RESOURCE, capacities

    alive = [n for n in ray.nodes() if n.get("Alive")]
    takers = [
        c for c in capacities(alive) if c.docker >= 1
    ]  # at least one: `cluster.connect` refuses a cluster without
    report.add(
        f"{RESOURCE} resource",
        True,
        f"{len(takers)} of {len(alive)} nodes advertise it: " + "; ".join(map(str, takers)),
    )
    task = ray.remote(node_facts)
    refs = {
        c.node_id: (
            task.options(
                num_cpus=0,
                max_retries=0,
                scheduling_strategy=NodeAffinitySchedulingStrategy(c.node_id, soft=False),
            ).remote()
        )
        for c in takers
    }
    ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=NODE_SECONDS)
    for capacity in takers:
        ref = refs[capacity.node_id]
        name = f"node {capacity.node_id[:12]}"
        if ref not in ready:
            ray.cancel(ref, force=True)
            report.add(
                name,
                False,
                f"did not answer within {NODE_SECONDS} s: its raylet or workers may be down",
            )
            continue
        try:
            facts = ray.get(ref, timeout=5)
        except Exception as exc:  # noqa: BLE001  (the node's failure is what the check reports)
            report.add(name, False, f"its task failed: {display(str(exc))[:500]}")
            continue
        _node(report, name, facts, ray.__version__, local_images)


def _node(
    report: Report,
    name: str,
    facts: dict[str, Any],
    ray_version: str,
    local_images: list[str] | None,
) -> None:
    where = f"on {display(str(facts.get('host')))}"
    report.add(
        f"{name} ray",
        facts.get("ray") == ray_version,
        f"ray {display(str(facts.get('ray')))} {where}"
        + (
            ""
            if facts.get("ray") == ray_version
            else f"; the caller has {ray_version}: install the same on both"
        ),
    )
    report.add(
        f"{name} assure",
        facts.get("assure") == assure.__version__,
        f"assure {display(str(facts.get('assure')))}, python {display(str(facts.get('python')))}"
        + (
            ""
            if facts.get("assure") == assure.__version__
            else f"; the caller has {assure.__version__}: deploy the same checkout"
        ),
    )
    if "engine_error" in facts:
        report.add(f"{name} engine", False, display(str(facts["engine_error"]))[:500])
        return
    report.add(
        f"{name} engine",
        True,
        f"docker {display(str(facts.get('engine')))}; runtimes"
        f" {', '.join(map(display, facts.get('runtimes') or []))}",
    )
    images = facts.get("images")
    if images is None:
        report.checks.append(
            Check(
                f"{name} images",
                Status.OPTIONAL,
                "not built there: the node builds them on its first spec (minutes)",
            )
        )
    elif local_images is not None and images != local_images:
        report.add(
            f"{name} images",
            False,
            f"{', '.join(map(display, images))} differ from the caller's {', '.join(local_images)}:"
            " the node's assure checkout differs; deploy the same to every node",
        )
    else:
        report.add(f"{name} images", True, ", ".join(map(display, images)))


def local_images() -> list[str] | None:
    """The caller's own image tags, or None when they are not built here (or no engine is)."""
    try:
        from assure.sandbox import registry

        return _image_tags(registry.create())
    except AssureError:
        return None


def _image_tags(backend: Any) -> list[str] | None:
    """The tags of this checkout's images on `backend`'s engine; None when they are not all
    built."""
    from assure.sandbox.docker.images import Images

    found = Images(backend).resolve()
    return [found.agent, found.gateway, found.egress] if found else None
