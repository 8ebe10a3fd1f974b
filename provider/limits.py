"""What one connection, and one client, may hold of the provider (`provider.connection` applies them).

A run's provider listens on loopback, where any local user can connect, and a
standalone one may listen on a network. Neither may be starved by a client that
opens connections and never finishes a request: each bound below keeps the
descriptors, memory and time such a client can hold small, and the run's own
processes (the provider's own user: the lab's controller and work-horses) keep
a reserve no other client can take.
"""

from __future__ import annotations

# -- one request ------------------------------------------------------------------------------

# The request line and headers together; more is answered 431 and the connection closed. The
# largest head the lab sends (a scoped URL and an armed hit's header, itself at most 8 KiB) is
# under 10 KiB; the parser would otherwise keep a header of any size in memory.
MAX_HEAD = 32 * 1024
# Headers in one request (431 beyond): as Python's own http.client allows; a lab request has under 10.
MAX_HEADERS = 100

# -- one connection: in the server's ticks (once a second of its event loop, so a provider that
# was paused counts the pause as one tick, and times out no client for its own stop) -----------

# A keep-alive connection idle for longer is closed.
IDLE_TICKS = 5
# A request begun and not received whole (head and body) for longer: the connection is closed. A
# client sends its request in one go; this leaves room for one paused between two writes (a
# stopped process, a GC pause, a loaded machine), and bounds how long a stalled one holds its slot.
REQUEST_TICKS = 30

# -- the listening sockets --------------------------------------------------------------------

# Connections the kernel queues for each listening socket until the server accepts them.
BACKLOG = 2048

# -- one client -------------------------------------------------------------------------------

# Connections open at once from one client other than the provider's own user (a local user, or
# a remote address): more are answered 503 and closed. A client's pool keeps far fewer (httpx
# keeps 100); a single user cannot take the descriptors every other client needs.
PER_CLIENT = 512
# Descriptors no connection takes: the provider's own files (its log's SQLite files, the bus's
# connection, its listening sockets, standard streams).
FILES_RESERVE = 64
# Connections kept for the provider's own user: other clients together hold at most the rest.
OWN_RESERVE = 1024
