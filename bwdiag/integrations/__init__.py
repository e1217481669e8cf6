"""Framework doors into ``bwdiag.profile``: each module is a thin callback over one Profile.

``bwdiag.integrations.lightning.BwdiagCallback`` for PyTorch Lightning's ``Trainer``,
``bwdiag.integrations.transformers.BwdiagCallback`` for Hugging Face's ``transformers.Trainer``.
The frameworks are optional extras (``pip install "bwdiag[lightning]"``); importing an integration
without its framework raises :class:`~bwdiag.errors.MissingExtra` saying what to install.
"""
