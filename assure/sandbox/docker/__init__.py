"""The Docker engine, the one package that imports docker-py: the backend (`backend`), the
gate its agent runs behind (`gate`), the images (`images`) and the CIS Docker Benchmark's
self-check (`cis`). Importing the package imports none of them, so a run on the fake never
loads docker-py."""
