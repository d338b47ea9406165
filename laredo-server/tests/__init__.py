"""laredo-server tests (a package, so modules share helpers with relative imports)."""
