"""The reproduction's verl engine: a grid's runs as verl launch folders (``launch``,
``rlvr reproduce --engine verl``) and the runs verl trained read back (``results``,
``--from-verl``). It uses the verl adapter (``rlvr.integrations.verl``: config translation,
data export, checkpoints) and imports no verl itself."""
