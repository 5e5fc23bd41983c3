"""Every protocol constant in one place: names, versions, wire layout, limits and lifetimes.

Limits are protocol facts, not settings: both ends must agree on them.
"""

from __future__ import annotations

from typing import Final

# -- Handshake -----------------------------------------------------------------------------------------------
PROTOCOL_NAME: Final = b"Noise_IK_25519_ChaChaPoly_BLAKE2b"
VERSION: Final = 1
# The prologue names the protocol and its version: a peer speaking another version cannot complete a handshake.
PROLOGUE: Final = b"agent-memory channel v1"

DH_LEN: Final = 32
HASH_LEN: Final = 64
KEY_LEN: Final = 32
TAG_LEN: Final = 16
SESSION_ID_LEN: Final = 16
REQUEST_ID_LEN: Final = 16

# Wire kinds: the second byte of every message.
KIND_HELLO: Final = 1  # msg1, client -> server
KIND_WELCOME: Final = 2  # msg2, server -> client
KIND_REQUEST: Final = 3  # tunnel request frame
KIND_HEAD: Final = 4  # response head (status, headers)
KIND_BODY: Final = 5  # one response body chunk
KIND_END: Final = 6  # end of the response: the only frame with FINAL set

HELLO_PAYLOAD_LEN: Final = 8  # the timestamp, nanoseconds since the epoch, big-endian
WELCOME_PAYLOAD_LEN: Final = SESSION_ID_LEN + 8 + 8  # session id, expiry (ms), server time (ms)
HELLO_LEN: Final = 2 + DH_LEN + (DH_LEN + TAG_LEN) + (HELLO_PAYLOAD_LEN + TAG_LEN)  # 106
WELCOME_LEN: Final = 2 + DH_LEN + (WELCOME_PAYLOAD_LEN + TAG_LEN)  # 82

# -- Frames ----------------------------------------------------------------------------------------------------
# version (1) | kind (1) | counter (8, big-endian) | length of the ciphertext (4, big-endian)
FRAME_HEADER_LEN: Final = 14
MAX_COUNTER: Final = 2**63 - 1
REPLAY_WINDOW: Final = 2048

MAX_INNER_HEAD: Final = 64 * 1024  # method, target and headers of one inner request or response
MAX_INNER_HEADERS: Final = 256
MAX_BODY: Final = 32 * 1024 * 1024  # one inner request body
MAX_REQUEST_FRAME: Final = FRAME_HEADER_LEN + REQUEST_ID_LEN + MAX_INNER_HEAD + MAX_BODY + TAG_LEN
MAX_CHUNK: Final = 1024 * 1024  # the server splits larger response chunks
MAX_RESPONSE_FRAME: Final = FRAME_HEADER_LEN + max(MAX_CHUNK, MAX_INNER_HEAD) + TAG_LEN

# A request body must keep coming: no gap longer than BODY_IDLE_TIMEOUT, and all of it within BODY_IDLE_TIMEOUT
# plus its length at MIN_BODY_RATE (32 MiB: about 17 minutes; a handshake: 20 s). A slow sender is cut off.
BODY_IDLE_TIMEOUT: Final = 20.0  # seconds
MIN_BODY_RATE: Final = 32 * 1024  # bytes per second

# -- Sessions ----------------------------------------------------------------------------------------------------
SESSION_LIFETIME: Final = 3600.0  # seconds, absolute
SESSION_IDLE: Final = 600.0  # seconds without a request
# msg1's timestamp must lie within this many seconds of the server's clock. Without a bound, one handshake stamped
# years ahead (a device clock gone wrong, or a stolen key) makes every later honest handshake look replayed.
CLOCK_WINDOW: Final = 300.0
REHANDSHAKE_MARGIN: Final = 30.0  # the client re-handshakes this long before either expiry
MAX_SESSIONS_PER_CALLER: Final = 32
MAX_SESSIONS: Final = 4096
# Request ids remembered per device key, so a request re-sent after a re-handshake is never run twice; an older one
# is refused all the same (ids sort by time, and the server keeps the highest it let go: `channel.request_ids`).
REQUEST_ID_MEMORY: Final = 8192

# -- HTTP ----------------------------------------------------------------------------------------------------------
HANDSHAKE_PATH: Final = "/v1/handshake"
TUNNEL_PATH: Final = "/v1/tunnel"
SESSION_HEADER: Final = "x-channel-session"
SERVER_KEY_HEADER: Final = "x-channel-server-key"
SERVER_TIME_HEADER: Final = "x-channel-server-time"  # ms, only on the answer to a device whose clock is off
# Only a msg1 made with an authorized device key and newer than every one accepted from it reaches this answer: a
# replayed msg1 gets the generic one, revoked key or not (unless the network kept that msg1 from the server, and
# every handshake of the key since). The device needs it to say "fix your clock" instead of "refused".
CLOCK_OFF: Final = b"handshake failed: device clock is off\n"
INDEX_HEADER: Final = "x-memory-index"
CONTENT_TYPE: Final = "application/x-memory-channel"
# The outer bodies are ciphertext, which does not compress: the client asks for no content coding and refuses an
# answer that has one (something between the ends added it, and decoding it first would be a decompression bomb).
CONTENT_CODING: Final = "identity"
