"""The verifier: snapshot the workspace, diff PRE against POST, and judge what changed."""
