"""Running a spec: the driver's state machine, one attempt's phases, the checks, the policy
that turns a spec into a gateway configuration, and promotion of verified results."""
