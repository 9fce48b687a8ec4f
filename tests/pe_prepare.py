"""The data preparation's test site: a local HTTP server of archives (Range honoured, cut or ignored on request),
prepare.sh run as a user runs it. Nothing leaves 127.0.0.1."""
import os
import re
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from pe_testing import REPO

PREPARE = REPO / "examples" / "wmt14" / "prepare.sh"


# ----------------------------------------------------------------------------------- the server
class Server:
    """Serves a folder on 127.0.0.1 with Range support; can cut a response off halfway, can ignore Range for
    some paths (``ignore_range``: the whole file with 200, as a server without Range support answers), and can answer
    a path's next request with an HTTP error (``fail_once``: {path: status})."""

    def __init__(self, root):
        self.root, self.log, self.cut_once, self.ignore_range, self.fail_once = root, [], set(), set(), {}
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                path = server.root / self.path.lstrip("/")
                if self.path in server.fail_once:
                    status = server.fail_once.pop(self.path)
                    self.send_error(status)
                    server.log.append((self.path, None, status, 0))
                    return
                if not path.is_file():
                    self.send_error(404)
                    server.log.append((self.path, None, 404, 0))
                    return
                data, rng, start = path.read_bytes(), self.headers.get("Range"), 0
                if rng and self.path in server.ignore_range:
                    rng = None
                if rng:
                    start = int(re.fullmatch(r"bytes=(\d+)-", rng).group(1))
                    if start >= len(data):
                        self.send_response(416)
                        self.send_header("Content-Range", f"bytes */{len(data)}")
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        server.log.append((self.path, rng, 416, 0))
                        return
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                else:
                    self.send_response(200)
                body = data[start:]
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.path in server.cut_once:  # announce the whole body, send half, hang up
                    server.cut_once.discard(self.path)
                    body = body[: len(body) // 2]
                self.wfile.write(body)
                server.log.append((self.path, rng, 206 if rng else 200, len(body)))

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def requests(self, suffix):
        return [entry for entry in self.log if entry[0].endswith(suffix)]

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def prepare(*args, cwd=None):
    env = {**os.environ, "PYTHON": sys.executable}
    result = subprocess.run(["bash", str(PREPARE), *map(str, args)], capture_output=True, text=True, env=env, cwd=cwd)
    result.output = result.stdout + result.stderr
    return result


