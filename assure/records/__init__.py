"""What a run leaves behind: the run directory's layout, the attempt record, the journal reader,
receipts (keys, seal, format, verification) and the rendered report."""
