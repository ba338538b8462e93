"""The ``dclust`` command line: turns arguments into public-API calls (see :mod:`dclust._cli.main`)."""
