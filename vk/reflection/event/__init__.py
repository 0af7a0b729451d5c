"""What the provider says about offloaded pods and reflected objects, told at home."""
