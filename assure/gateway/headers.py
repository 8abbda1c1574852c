"""Header names as a server may read them: the one spelling every gateway filter compares.

CGI, WSGI, PHP and the servers built on them turn `Content-Length` and `Content_Length` alike
into HTTP_CONTENT_LENGTH, so a filter that compares the spelling sent lets `Content_Length`
through beside the real one (request smuggling into the upstream). Every filter of header
names in the gateway (its own server, `http.request`, the model proxy) compares `key(name)`.
The egress proxy, its own image, states the same function once for itself.
"""


def key(name: str) -> str:
    """`name` lowercased, with `_` read as `-`."""
    return name.lower().replace("_", "-")
