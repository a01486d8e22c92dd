"""`python -m tg_pci_server` runs the `tg-pci-server` command line."""

from tg_pci_server.cli import main

raise SystemExit(main())
