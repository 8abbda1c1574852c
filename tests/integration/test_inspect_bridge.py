"""Inspect's sandbox agent bridge in the `assure` sandbox: an agent that Inspect runs inside the
attempt's container reaches the eval's model (mockllm) through the bridge's in-container proxy.

The proxy listens on the container's own loopback (port 13131), which a container with no
network still has; Inspect's tools run from /var/tmp as the attempt's user. The agent asks the
model for a command, runs it itself (a direct edit, judged from the snapshots) and the sample
passes. The proxy takes about a second to listen, so the agent retries its first connection.
"""

from __future__ import annotations

from inspect_ai import Task
from inspect_ai import eval as inspect_eval
from inspect_ai.agent import AgentState, agent, sandbox_agent_bridge
from inspect_ai.dataset import Sample
from inspect_ai.model import ModelOutput, ModelUsage, get_model
from inspect_ai.util import sandbox

from assure.inspect import AssureConfig, assure_verdict
from examples.inspect.task import SPEC

AGENT = r"""
import json, subprocess, time, urllib.error, urllib.request
body = {"model": "inspect", "messages": [{"role": "user", "content": "fix add()"}]}
req = urllib.request.Request("http://127.0.0.1:13131/v1/chat/completions",
    data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
for _ in range(60):
    try:
        answer = json.load(urllib.request.urlopen(req, timeout=60))
        break
    except urllib.error.URLError:
        time.sleep(0.5)
command = answer["choices"][0]["message"]["content"]
subprocess.run(["sh", "-c", command], cwd="/workspace", check=True)
print("ran", command)
"""
FIX = "sed -i 's/return a - b/return a + b/' src/calc.py"


@agent
def inside():
    async def execute(state: AgentState) -> AgentState:
        async with sandbox_agent_bridge(state) as bridge:
            await sandbox().write_file("out/agent.py", AGENT)
            result = await sandbox().exec(["python3", "/workspace/out/agent.py"], timeout=120)
            assert result.success, result.stderr
            assert result.stdout.strip() == f"ran {FIX}"
        return bridge.state

    return execute


def test_an_agent_inside_the_sandbox_reaches_the_model_through_the_bridge(tmp_path):
    out = ModelOutput.from_content("mockllm/model", FIX)
    out.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)
    task = Task(
        dataset=[Sample(input="fix add()")],
        solver=inside(),
        scorer=assure_verdict(),
        sandbox=("assure", AssureConfig(spec=SPEC, runs_dir=str(tmp_path / "runs"))),
        model=get_model("mockllm/model", custom_outputs=[out]),
    )
    [log] = inspect_eval(task, log_dir=str(tmp_path / "logs"), display="none")
    assert log.status == "success", log.error
    [sample] = log.samples
    [score] = sample.scores.values()
    assert (score.value, score.answer) == ("C", "pass"), score.explanation
