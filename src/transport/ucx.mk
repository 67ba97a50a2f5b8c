# UCX transport: built when configure found UCX.
