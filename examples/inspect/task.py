"""An Inspect task in an assure sandbox: copy this folder, point `SPEC` at your own spec.

    pip install 'assure[inspect]'
    inspect eval examples/inspect/task.py --model mockllm/model   # the scripted model below
    inspect eval examples/inspect/task.py --model anthropic/...   # or a real one

Each sample is a fresh assure attempt (hardened container, bounded workspace, gateway,
journal); `assure_verdict` scores it from the judged run, never from the model's answer.
The run directory is in each score's metadata (`run_dir`): `assure show RUN` tells the rest.
"""

from pathlib import Path

from inspect_ai import Task, task
from inspect_ai.dataset import Sample
from inspect_ai.model import ModelOutput, ModelUsage, get_model
from inspect_ai.solver import basic_agent
from inspect_ai.tool import bash, text_editor

from assure.inspect import AssureConfig, assure_verdict

SPEC = str(Path(__file__).with_name("calc.yaml"))
PROMPT = "add() in /workspace/src/calc.py is wrong. Fix it; the tests are in /workspace/tests."


def _call(tool: str, **arguments: object) -> ModelOutput:
    """One scripted tool call, with its own usage (else mockllm counts tokens with tiktoken,
    which downloads its encoding on first use)."""
    out = ModelOutput.for_tool_call("mockllm/model", tool, dict(arguments))
    out.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)
    return out


def _edit(path: str, old: str, new: str) -> ModelOutput:
    return _call("text_editor", command="str_replace", path=path, old_str=old, new_str=new)


def fix_calc_script() -> list[ModelOutput]:
    """What a model that fixes the bug would say: look, edit, test, submit."""
    return [
        _call("bash", command="cat src/calc.py"),
        _edit("/workspace/src/calc.py", "return a - b", "return a + b"),
        _call("bash", command="python3 tests/test_calc.py"),
        _call("submit", answer="fixed add()"),
    ]


@task
def calc(script: list[ModelOutput] | None = None, config: str | AssureConfig = SPEC) -> Task:
    """One sample: fix add(). With `--model mockllm/model`, the scripted fix plays it.
    `config`: the spec's path, or an `AssureConfig` (the spec and where runs go)."""
    model = get_model("mockllm/model", custom_outputs=script or fix_calc_script())
    return Task(
        dataset=[Sample(input=PROMPT, id="fix-add")],
        solver=basic_agent(tools=[bash(timeout=60), text_editor()], max_attempts=1),
        scorer=assure_verdict(),
        sandbox=("assure", config),
        model=model,
    )
