# libfabric transport: built when configure found libfabric.
