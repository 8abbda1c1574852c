"""What a run leaves behind: the run directory's layout, the journal reader, receipts and the
rendered report."""
