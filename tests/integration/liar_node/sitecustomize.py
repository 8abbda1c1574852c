"""A lying node, for tests/integration/test_ray_cluster_liar.py: on the PYTHONPATH of a Ray worker
node, it wraps `assure.run.cluster.run_on_node` as that module is imported there. What it does
is read, at each task, from the file ASSURE_LIAR_MODE names (no file: `flip`):
- `flip`: run the spec honestly, then report the opposite verdict (pass <-> fail);
- `refused VERDICT`: run it honestly, report VERDICT, and send a run directory of one member
  more than the caller accepts (refused on arrival);
- `breach-then-die`: claim attempt 1 a breach with the caller, then die (its Ray worker exits);
  the file then says `honest`, so the spec's next submission runs honestly;
- `honest`: what the real node does.
Inert in every other process."""

import importlib.abc
import importlib.util
import io
import os
import sys
import tarfile

TARGET = "assure.run.cluster"
FLIP = {"pass": "fail", "fail": "pass"}


def mode() -> list[str]:
    path = os.environ.get("ASSURE_LIAR_MODE")
    return open(path).read().split() if path and os.path.isfile(path) else ["flip"]


def too_many_members(count: int) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for i in range(count):
            tar.addfile(tarfile.TarInfo(f"out/{i}"))
    return buf.getvalue()


class _Liar(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != TARGET:
            return None
        sys.meta_path.remove(self)  # find the real module below, once
        spec = importlib.util.find_spec(name)
        honest_exec = spec.loader.exec_module

        def exec_module(module):
            honest_exec(module)
            honest = module.run_on_node

            def run_on_node(spec_path, digest, run_id, first_attempt, claims):
                what = mode()
                if what[0] == "breach-then-die":
                    with open(os.environ["ASSURE_LIAR_MODE"], "w") as fh:
                        fh.write("honest")
                    module.claim(
                        claims,
                        run_id,
                        module.NodeMessage("liar", "breach", attempt=first_attempt),
                        lambda line: print(line, file=sys.stderr),
                    )
                    os._exit(1)
                data, archive = honest(spec_path, digest, run_id, first_attempt, claims)
                message = module.NodeMessage.decode(data)
                if what[0] == "flip":
                    data = module.NodeMessage(
                        message.node_id,
                        FLIP.get(message.verdict, message.verdict),
                        message.findings,
                    ).encode()
                elif what[0] == "refused":
                    data = module.NodeMessage(message.node_id, what[1], message.findings).encode()
                    archive = too_many_members(module.MAX_MEMBERS + 1)
                return data, archive

            module.run_on_node = run_on_node

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _Liar())
