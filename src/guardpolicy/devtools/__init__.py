"""Tools for working on guardpolicy itself: smoke-sized study workspaces (shared by the end-to-end tests and
`guardpolicy bench-dag`) and the DAG timing benchmark. Not imported by any pipeline stage."""
