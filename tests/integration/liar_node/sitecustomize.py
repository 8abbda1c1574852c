"""A lying node, for tests/integration/test_ray_cluster_liar.py: on the PYTHONPATH of a Ray worker
node, it wraps `assure.run.cluster.run_on_node` as that module is imported there, so the node runs
the spec honestly and then reports the opposite verdict. Inert in every other process."""

import importlib.abc
import importlib.util
import sys

TARGET = "assure.run.cluster"
FLIP = {"pass": "fail", "fail": "pass"}


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

            def run_on_node(*args, **kwargs):
                result = honest(*args, **kwargs)
                return module.NodeResult(result.node_id, FLIP.get(result.verdict, result.verdict), result.archive)

            module.run_on_node = run_on_node

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _Liar())
