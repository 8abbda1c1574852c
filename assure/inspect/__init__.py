"""assure inside Inspect AI (`pip install 'assure[inspect]'`): the `assure` sandbox environment
(each sample a fresh, judged assure attempt) and the `assure_verdict` scorer. Inspect finds the
sandbox through the `inspect_ai` entry point, which imports this package."""

from assure.inspect.sandbox import AssureConfig, AssureSandbox
from assure.inspect.scorer import assure_verdict

__all__ = ["AssureConfig", "AssureSandbox", "assure_verdict"]
