#!/usr/bin/env python3
"""Submit a CSV file to bulkaction's HTTP API and follow the group to its end.

One job per CSV row (the first row is the header):
  - the "id" column is the job's id (default: the row's number, 1 for the
    first row after the header);
  - the "type" column is the job's type (default: --type);
  - a "payload" column holds the job's payload as JSON; without one, the
    other columns become the payload object, a cell that is a JSON number,
    true, false or null as such, any other cell as a string.

The rows are streamed as NDJSON (chunked, without Content-Length) to
POST /v1/groups/<group>/jobs?total=<rows>, which stores them and seals the
group. From standard input ("-") the rows are counted while they are sent,
and the group is sealed afterwards with POST /v1/groups/<group>/seal.
Then GET /v1/groups/<group>/events is followed (Server-Sent Events,
reopened with Last-Event-ID when the connection drops) until the group's
final event.

Exit status: 0 when the group COMPLETED, 3 when it was CANCELLED, 1 on an
error (the API's problem+json title, detail and field errors are printed),
2 on bad arguments.

Only the Python standard library is used (Python 3.9 or newer).
"""

import argparse
import csv
import http.client
import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid

EXIT_COMPLETED, EXIT_ERROR, EXIT_USAGE, EXIT_CANCELLED = 0, 1, 2, 3

# How long an event stream may be silent (the gateway sends a keep-alive
# comment every 15 s by default) before it is taken for dead and reopened.
STREAM_IDLE_SECONDS = 60
# How long to wait for a group that is not known yet (its jobs may still be
# on their way from the gateway to the pipeline).
APPEAR_SECONDS = 60
# How many times in a row the event stream may fail to open (or break
# before an event) before the script gives up.
MAX_FAILURES = 8


class APIError(Exception):
    """An error answer of the API (a problem+json document) or a failure to
    reach it."""

    def __init__(self, status, problem):
        self.status = status
        self.problem = problem
        super().__init__(format_problem(status, problem))


def format_problem(status, problem):
    title = problem.get("title") or "error"
    text = "%s %s" % (status, title)
    if problem.get("detail"):
        text += ": " + problem["detail"]
    for err in problem.get("errors") or []:
        where = []
        if err.get("line"):
            where.append("line %d" % err["line"])
        elif err.get("index") is not None:
            where.append("jobs[%d]" % err["index"])
        if err.get("field"):
            where.append("field " + err["field"])
        msg = err.get("detail", "")
        if err.get("limit"):
            msg += " (%s)" % err["limit"]
        text += "\n  " + ": ".join(where + [msg])
    return text


def read_error(e):
    """Turns an urllib HTTPError into an APIError, reading its problem."""
    body = e.read()
    try:
        problem = json.loads(body)
        if not isinstance(problem, dict):
            raise ValueError
    except ValueError:
        problem = {"title": e.reason, "detail": body.decode("utf-8", "replace")[:200]}
    return APIError(e.code, problem)


class Client:
    def __init__(self, api, key, tenant=None):
        self.api = api.rstrip("/")
        if self.api.endswith("/v1"):
            self.api = self.api[: -len("/v1")]
        self.key = key
        self.tenant = tenant

    def url(self, path, query=None):
        q = dict(query or {})
        if self.tenant:
            q["tenant"] = self.tenant
        u = self.api + path
        if q:
            u += "?" + urllib.parse.urlencode(q, doseq=True)
        return u

    def request(self, method, path, query=None, body=None, headers=None, timeout=120):
        """Sends a request; returns the open response (2xx) or raises
        APIError. A body that is an iterable of bytes is sent chunked."""
        h = {"Authorization": "Bearer " + self.key, "User-Agent": "bulkaction-submit-csv"}
        h.update(headers or {})
        req = urllib.request.Request(self.url(path, query), data=body, headers=h, method=method)
        try:
            return urllib.request.urlopen(req, timeout=timeout)
        except urllib.error.HTTPError as e:
            raise read_error(e) from None

    def json(self, method, path, query=None, body=None, headers=None):
        with self.request(method, path, query, body, headers) as resp:
            return resp.status, json.load(resp)


def cell(value):
    """A CSV cell as a JSON value: numbers, true, false and null as such,
    anything else as a string."""
    v = value.strip()
    if v in ("true", "false", "null"):
        return json.loads(v)
    try:
        return int(v)
    except ValueError:
        pass
    try:
        f = float(v)
        if v.lower() not in ("nan", "inf", "-inf", "infinity", "-infinity"):
            return f
    except ValueError:
        pass
    return value


def jobs_of(rows, default_type):
    """Yields the job object of each CSV row (a dict from csv.DictReader)."""
    for n, row in enumerate(rows, start=1):
        if None in row:
            raise ValueError("row %d has more cells than the header" % n)
        row = dict(row)
        job_id = (row.pop("id", None) or "").strip() or str(n)
        job_type = (row.pop("type", None) or "").strip() or default_type
        if not job_type:
            raise ValueError("row %d: no type (add a type column or pass --type)" % n)
        job = {"jobId": job_id, "type": job_type}
        if "payload" in row:
            raw = row.pop("payload")
            if raw is not None and raw.strip():
                try:
                    job["payload"] = json.loads(raw)
                except ValueError as e:
                    raise ValueError("row %d: payload is not JSON: %s" % (n, e)) from None
        else:
            job["payload"] = {k: cell(v) for k, v in row.items() if k and v is not None and v != ""}
        yield job


class Counter:
    """Counts the jobs a generator body has sent."""

    def __init__(self):
        self.n = 0


def ndjson(jobs, counter, chunk=256):
    """Yields NDJSON bytes, a chunk of jobs at a time."""
    buf = []
    for job in jobs:
        buf.append(json.dumps(job, separators=(",", ":")))
        counter.n += 1
        if len(buf) == chunk:
            yield ("\n".join(buf) + "\n").encode("utf-8")
            buf = []
    if buf:
        yield ("\n".join(buf) + "\n").encode("utf-8")


def open_csv(path):
    if path == "-":
        return sys.stdin
    return open(path, newline="", encoding="utf-8-sig")


def count_rows(path):
    with open_csv(path) as f:
        return sum(1 for _ in csv.DictReader(f))


def submit(client, args):
    """Streams the CSV's jobs; returns the 202 answer's JSON."""
    query = {}
    if args.priority:
        query["priority"] = args.priority
    if args.max_in_flight is not None:
        query["maxInFlight"] = str(args.max_in_flight)
    if args.not_before:
        query["notBefore"] = args.not_before
    if args.window:
        query["window"] = args.window  # repeated: one sending window each
    if args.callback_url:
        query["callbackUrl"] = args.callback_url
    from_stdin = args.csv == "-"
    if not from_stdin:
        query["total"] = str(count_rows(args.csv))
    key = args.idempotency_key or str(uuid.uuid4())
    headers = {"Content-Type": "application/x-ndjson", "Idempotency-Key": key}
    # A file can be sent again: a 503 or a dropped connection is retried
    # with the same Idempotency-Key, so it is done once. Standard input
    # can be read once only.
    attempts = 1 if from_stdin else 4
    for attempt in range(1, attempts + 1):
        counter = Counter()
        f = open_csv(args.csv)
        try:
            body = ndjson(jobs_of(csv.DictReader(f), args.type), counter)
            _, answer = client.json("POST", "/v1/groups/%s/jobs" % quote(args.group), query, body, headers)
            break
        except APIError as e:
            retry = e.status in (502, 503, 504) or e.problem.get("type", "").endswith("idempotency-key-in-progress")
            if not retry or attempt == attempts:
                raise
        except (OSError, http.client.HTTPException) as e:
            if attempt == attempts:
                raise
            print("submit: %s; retrying" % e, file=sys.stderr)
        finally:
            if f is not sys.stdin:
                f.close()
        time.sleep(attempt)
    print(json.dumps(answer))
    if from_stdin:
        _, sealed = client.json("POST", "/v1/groups/%s/seal" % quote(args.group), {"total": str(counter.n)},
                                headers={"Idempotency-Key": key + "-seal"})
        print(json.dumps(sealed))
    return answer


def quote(s):
    return urllib.parse.quote(s, safe="")


def sse_events(resp):
    """Yields (id, event, data) of a Server-Sent Events response."""
    ev_id, name, data = None, None, []
    for raw in resp:
        line = raw.decode("utf-8").rstrip("\r\n")
        if line == "":
            if data:
                yield ev_id, name or "message", "\n".join(data)
            ev_id, name, data = None, None, []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if field == "id":
            ev_id = value
        elif field == "event":
            name = value
        elif field == "data":
            data.append(value)


def final(ev):
    """The stream's last event: COMPLETED, or CANCELLED with every job
    accounted for."""
    if ev["state"] == "COMPLETED":
        return True
    return ev["state"] == "CANCELLED" and ev["succeeded"] + ev["failed"] + ev["cancelled"] >= ev["jobs"]


def describe(name, ev):
    done = ev["succeeded"] + ev["failed"] + ev["cancelled"]
    target = ev["total"] or ev["jobs"]
    text = "%-8s %s %d/%d done (%d succeeded, %d failed, %d cancelled)" % (
        name, ev["state"], done, target, ev["succeeded"], ev["failed"], ev["cancelled"])
    if ev.get("notice"):
        text += " notice: " + ev["notice"]
    return text


def follow(client, group):
    """Prints the group's events until its final one, which it returns.
    A dropped stream is reopened with Last-Event-ID."""
    last_id = None
    wait = 0.5
    failures = 0
    appear_until = time.monotonic() + APPEAR_SECONDS
    while True:
        headers = {"Accept": "text/event-stream"}
        if last_id:
            headers["Last-Event-ID"] = last_id
        try:
            with client.request("GET", "/v1/groups/%s/events" % quote(group), headers=headers,
                                timeout=STREAM_IDLE_SECONDS) as resp:
                for ev_id, name, data in sse_events(resp):
                    wait, failures = 0.5, 0
                    if ev_id:
                        last_id = ev_id
                    ev = json.loads(data)
                    print(describe(name, ev), flush=True)
                    if final(ev):
                        return ev
            print("events: the stream ended early; reconnecting", file=sys.stderr)
        except APIError as e:
            if e.status == 404 and time.monotonic() < appear_until:
                pass  # not ingested yet
            elif e.status not in (502, 503, 504) or failures >= MAX_FAILURES:
                raise
            else:
                failures += 1
        except (OSError, http.client.HTTPException) as e:
            # A dropped connection, a silent stream (socket timeout) or a
            # stream cut inside a chunk (IncompleteRead).
            failures += 1
            if failures > MAX_FAILURES:
                raise
            print("events: %s; reconnecting" % (e or e.__class__.__name__,), file=sys.stderr)
        time.sleep(wait)
        wait = min(wait * 2, 10)


def follow_callback(client, group, timeout):
    """Waits up to timeout seconds for the group's completion callback to be
    delivered or to fail, and returns its delivery state (the group view's
    "callback"; None when the group has none)."""
    deadline = time.monotonic() + timeout
    while True:
        _, view = client.json("GET", "/v1/groups/%s" % quote(group))
        cb = view.get("callback")
        if cb is None or cb["state"] in ("delivered", "failed") or time.monotonic() >= deadline:
            return cb
        time.sleep(0.5)


def describe_callback(cb):
    text = "callback %s after %d attempt%s to %s" % (cb["state"], cb["attempts"], "" if cb["attempts"] == 1 else "s", cb["url"])
    if cb.get("lastError"):
        text += " (last error: %s)" % cb["lastError"]
    return text


def main(argv=None):
    p = argparse.ArgumentParser(description="Submit a CSV file of jobs to bulkaction's HTTP API and follow the group.")
    p.add_argument("csv", help="CSV file (header row; columns id, type, payload or payload fields), - for standard input")
    p.add_argument("--api", default=os.environ.get("BULKACTION_API") or "http://127.0.0.1:8090",
                   help="gateway address (default $BULKACTION_API, else http://127.0.0.1:8090)")
    p.add_argument("--group", required=True, help="group id (^[A-Za-z0-9_-]{1,128}$)")
    p.add_argument("--priority", choices=["high", "normal", "low"], help="the group's priority level")
    p.add_argument("--max-in-flight", type=int, help="most of the group's jobs running at once (0 = no limit)")
    p.add_argument("--not-before", help="start at: hold the jobs back until this RFC 3339 time (2026-11-27T09:00:00+01:00)")
    p.add_argument("--window", action="append",
                   help='sending window, repeatable: "DAYS FROM-TO ZONE", e.g. "mon-fri 09:00-17:00 Europe/Berlin"')
    p.add_argument("--callback-url",
                   help="completion callback: POST the group's final event here, signed with the tenant's callback secret")
    p.add_argument("--callback-wait", type=float, default=30,
                   help="with --callback-url, how long to wait for the callback's delivery once the group ended (seconds)")
    p.add_argument("--type", default="", help="job type of rows without a type column")
    p.add_argument("--tenant", default=os.environ.get("BULKACTION_TENANT") or None,
                   help="tenant of the group, for an admin key (default $BULKACTION_TENANT)")
    p.add_argument("--idempotency-key", help="the submission's Idempotency-Key (default: a random one)")
    args = p.parse_args(argv)
    key = os.environ.get("BULKACTION_API_KEY", "").strip()
    if not key:
        p.error("set BULKACTION_API_KEY to your API key")
    client = Client(args.api, key, args.tenant)
    try:
        submit(client, args)
        ev = follow(client, args.group)
        cb = follow_callback(client, args.group, args.callback_wait) if args.callback_url else None
    except APIError as e:
        print("error: " + str(e), file=sys.stderr)
        return EXIT_ERROR
    except (OSError, http.client.HTTPException, ValueError, csv.Error) as e:
        print("error: %s" % (e,), file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    if cb is not None:
        print(describe_callback(cb))
    if ev["state"] == "COMPLETED":
        print("group %s COMPLETED: %d succeeded, %d failed" % (args.group, ev["succeeded"], ev["failed"]))
        return EXIT_COMPLETED
    print("group %s %s: %d succeeded, %d failed, %d cancelled" % (
        args.group, ev["state"], ev["succeeded"], ev["failed"], ev["cancelled"]), file=sys.stderr)
    return EXIT_CANCELLED


if __name__ == "__main__":
    sys.exit(main())
