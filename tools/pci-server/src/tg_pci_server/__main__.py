"""`python -m tg_pci_server` runs the `tg-pci-server` command line."""

from tg_pci_server.entry import main

main()
