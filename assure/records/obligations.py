"""The conformance packet's obligation ids, apart from the packet code: the CLI names them in
`--help`, which must not import jsonschema or cryptography (issue 25)."""

# MACHINE.md's live-evidence table: the chaos rows carry the standard's own ids; the "also"
# row gives none, so each of its five scenarios is named here once.
OBLIGATIONS: dict[str, str] = {
    "chaos_kill_resume": (
        "kill -9 the driver mid-move: restart resumes the same task id; no duplicate effect"
    ),
    "chaos_lying_worker": (
        "the worker reports success on a failing change: the verifier blocks the commit"
    ),
    "chaos_override_bypass": (
        "override asserted, worker keeps trying every path: every continuation refused, nothing"
        " mutates"
    ),
    "chaos_dup_key": "two actions with one idempotency key: one effect",
    "chaos_budget_thermal": "drive a budget breach: halt + alert within N s, N measured",
    "chaos_signed_aar": (
        "export the receipt chain: an independent verifier validates it with the public key"
    ),
    "earned_autonomy": (
        "L5: N verified passes raise the dial from propose to commit; one breach drops it; a forged"
        " receipt is refused"
    ),
    "missing_verifier_propose_only": "no verifier: trust 0, propose-only, nothing committed",
    "max_attempts_quarantine": "max attempts reached: terminal quarantine with a pending alert",
    "forged_rollback_irreversible": (
        "a rollback_ref that does not resolve for the effect: the action counts as irreversible"
    ),
    "unratified_contract_no_commit": "an unratified contract: a verified result is not committed",
    "stale_heartbeat_alert_ack": (
        "a stale heartbeat: an alert that stays pending until acknowledged"
    ),
}
