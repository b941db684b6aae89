"""How a database server is reached unless a setting says otherwise: each connection made within
CONNECT_TIMEOUT_S seconds, at most POOL_SIZE of them open at once per database."""

CONNECT_TIMEOUT_S = 5
POOL_SIZE = 10
