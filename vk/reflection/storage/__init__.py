"""Where offloaded pods keep their data: claims of the virtual storage class."""
