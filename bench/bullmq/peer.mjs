// peer.mjs runs the workloads of bulkaction's end-to-end benchmark (package
// bench, bench/bullmq.go) through BullMQ: one Queue for the producer and one
// Worker whose processor does nothing but count, both in this process.
//
// Usage:
//
//	node peer.mjs [--redis URL] [--concurrency N]
//
// --redis (or BULLMQ_REDIS_URL, default redis://127.0.0.1:6379/2) is the
// redis:// URL of the database BullMQ uses; --concurrency (or
// BULLMQ_CONCURRENCY, default 50) is the Worker's concurrency.
//
// Once connected it prints {"op":"ready",...} on stdout, then reads one JSON
// request per line on stdin and answers each with one JSON line on stdout
// ({"error":"..."} on failure); it exits when stdin closes. Logs go to
// stderr. Requests, and what their answers hold (times in ms, from
// performance.now(), so at µs resolution):
//
//	{"op":"throughput","jobs":N}
//	  N jobs added with addBulk in chunks of 1000 while the Worker runs.
//	  -> elapsed_ms: first addBulk until the processor ran for the last job;
//	     submitted_ms: until the last addBulk returned.
//	{"op":"million","jobs":N}
//	  The throughput workload at the million run's size (N is 1,000,000 by
//	  default), in a queue of its own: N jobs added with addBulk in chunks
//	  of 1000 while the Worker runs.
//	  -> elapsed_ms and submitted_ms, as for throughput.
//	{"op":"hol","backlog":B,"small":S}
//	  B jobs added while no Worker runs, then the Worker starts and S jobs of
//	  the "small" tenant are added to the same queue (BullMQ has no groups:
//	  one queue is one FIFO).
//	  -> delay_ms: Worker start until the processor ran for the last small
//	     job; backlog_done_first: backlog jobs run by then.
//	{"op":"latency","rate":R,"duration_ms":D,"warmup_ms":W}
//	  R jobs per second added for D ms (every 5 ms, the jobs due), each
//	  carrying its add time.
//	  -> sent, duration_ms, and latencies_us: add call until the processor
//	     started, one per job added after the first W ms.
//	{"op":"queued","jobs":N,"payload_bytes":P}
//	  N jobs, each with data whose JSON is P bytes, added with addBulk in
//	  chunks of 1000 to a queue of their own while no Worker runs; they stay
//	  queued (the memory of a backlog). Nothing removes them: the benchmark
//	  reads Redis's memory and then stops the server.
//	  -> added.
//	{"op":"cpu"}
//	  -> cpu_us: this process's CPU time so far (user + system).
//
// Every workload has a queue of its own, emptied (obliterated) before it
// starts. Jobs are removed on completion, as asynq does without Retention
// and bulkaction does with KEEP_SUCCEEDED_JOBS=false (its million run).

import { createInterface } from "node:readline";
import { parseArgs } from "node:util";
import { performance } from "node:perf_hooks";
import { createRequire } from "node:module";
import { Queue, Worker } from "bullmq";
import IORedis from "ioredis";

const { values: args } = parseArgs({
  options: {
    redis: { type: "string", default: process.env.BULLMQ_REDIS_URL || "redis://127.0.0.1:6379/2" },
    concurrency: { type: "string", default: process.env.BULLMQ_CONCURRENCY || "50" },
  },
});
const redisURL = args.redis;
const concurrency = Number.parseInt(args.concurrency, 10);
if (!(concurrency > 0)) {
  throw new Error(`peer.mjs: --concurrency ${args.concurrency}: want a positive integer`);
}

// addChunk is how many jobs one addBulk call carries (the pipeline's
// producer puts 1000 jobs in one Submit call).
const addChunk = 1000;
// tickMs is how often the latency run adds the jobs due.
const tickMs = 5;

const connect = () => new IORedis(redisURL, { maxRetriesPerRequest: null });
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// run is the processor's view of the current workload: counts of jobs run
// per tenant (0: "noop", 1: "small"), promises resolved when a tenant's
// count reaches its target, and the latency samples when rec is set.
let run = newRun(0, 0, false);

function newRun(wantA, wantB, rec) {
  const r = { want: [wantA, wantB], count: [0, 0], done: [], resolve: [], rec, lat: [] };
  for (const i of [0, 1]) {
    r.done[i] = new Promise((res) => { r.resolve[i] = res; });
    if (r.want[i] === 0) r.resolve[i]();
  }
  return r;
}

async function processor(job) {
  const r = run;
  if (r.rec) r.lat.push([job.data.t, performance.now() - job.data.t]);
  const i = job.name === "small" ? 1 : 0;
  if (++r.count[i] === r.want[i]) r.resolve[i]();
}

// open returns an empty queue of its own for a workload and a Worker on it
// that is connected but not yet running; start() runs it, close() stops
// both.
async function open(name) {
  const qconn = connect();
  const wconn = connect();
  const queue = new Queue(name, {
    connection: qconn,
    defaultJobOptions: { removeOnComplete: true, removeOnFail: true },
  });
  await queue.waitUntilReady();
  await queue.obliterate({ force: true });
  const worker = new Worker(name, processor, { connection: wconn, concurrency, autorun: false });
  worker.on("error", (err) => console.error(`peer.mjs: worker: ${err.message}`));
  await worker.waitUntilReady();
  let running;
  return {
    queue,
    start() {
      running = worker.run().catch((err) => console.error(`peer.mjs: worker run: ${err.message}`));
    },
    async close() {
      await worker.close();
      await running;
      await queue.obliterate({ force: true });
      await queue.close();
      qconn.disconnect();
      wconn.disconnect();
    },
  };
}

// add adds n jobs named name in chunks, each job carrying the time of its
// addBulk call.
async function add(queue, name, n) {
  for (let done = 0; done < n; ) {
    const k = Math.min(addChunk, n - done);
    const t = performance.now();
    const jobs = new Array(k);
    for (let j = 0; j < k; j++) jobs[j] = { name, data: { t } };
    await queue.addBulk(jobs);
    done += k;
  }
}

// drain adds jobs jobs to the queue name with addBulk (addChunk per call)
// while its Worker runs, and returns once the processor has run for the
// last one.
async function drain(name, jobs) {
  const q = await open(name);
  try {
    run = newRun(jobs, 0, false);
    q.start();
    const start = performance.now();
    await add(q.queue, "noop", jobs);
    const submitted = performance.now() - start;
    await run.done[0];
    return { elapsed_ms: performance.now() - start, submitted_ms: submitted };
  } finally {
    await q.close();
  }
}

const throughput = ({ jobs }) => drain("bench-throughput", jobs);

const million = ({ jobs }) => drain("bench-million", jobs);

async function hol({ backlog, small }) {
  const q = await open("bench-hol");
  try {
    run = newRun(backlog, small, false);
    await add(q.queue, "noop", backlog);
    const start = performance.now();
    q.start();
    await add(q.queue, "small", small);
    await run.done[1];
    const res = { delay_ms: performance.now() - start, backlog_done_first: run.count[0] };
    await run.done[0];
    return res;
  } finally {
    await q.close();
  }
}

async function latency({ rate, duration_ms: d, warmup_ms: warmup }) {
  const want = Math.floor((rate * d) / 1000);
  const q = await open("bench-latency");
  try {
    run = newRun(want, 0, true);
    q.start();
    // The schedule is kept: a late tick adds every job due so far.
    const pending = [];
    let addErr;
    const start = performance.now();
    let sent = 0;
    for (;;) {
      const el = Math.min(performance.now() - start, d);
      const due = Math.floor((rate * el) / 1000) - sent;
      if (due > 0) {
        const t = performance.now();
        const jobs = new Array(due);
        for (let j = 0; j < due; j++) jobs[j] = { name: "noop", data: { t } };
        pending.push(q.queue.addBulk(jobs).catch((err) => { addErr ??= err; }));
        sent += due;
      }
      if (el >= d) break;
      await sleep(tickMs);
    }
    await Promise.all(pending);
    if (addErr) throw addErr;
    const elapsed = performance.now() - start;
    await run.done[0];
    const from = start + warmup;
    const lat = [];
    for (const [t, l] of run.lat) if (t >= from) lat.push(Math.round(l * 1000));
    return { sent, duration_ms: elapsed, latencies_us: lat };
  } finally {
    await q.close();
  }
}

async function queued({ jobs, payload_bytes: size }) {
  const queue = new Queue("bench-queued", {
    connection: connect(),
    defaultJobOptions: { removeOnComplete: true, removeOnFail: true },
  });
  await queue.waitUntilReady();
  await queue.obliterate({ force: true });
  // {"p":"xx…"}: 8 bytes of JSON around the string
  const data = { p: "x".repeat(Math.max(0, size - 8)) };
  for (let done = 0; done < jobs; ) {
    const k = Math.min(addChunk, jobs - done);
    const batch = new Array(k);
    for (let j = 0; j < k; j++) batch[j] = { name: "noop", data };
    await queue.addBulk(batch);
    done += k;
  }
  return { added: jobs };
}

function cpu() {
  const u = process.cpuUsage();
  return { cpu_us: u.user + u.system };
}

const ops = { throughput, million, hol, latency, queued, cpu };

const reply = (v) => process.stdout.write(JSON.stringify(v) + "\n");

// Connected before saying ready, so that a wrong URL fails here.
const probe = connect();
await probe.ping();
probe.disconnect();
const version = createRequire(import.meta.url)("bullmq/package.json").version;
reply({ op: "ready", bullmq: version, node: process.version, concurrency });

for await (const line of createInterface({ input: process.stdin })) {
  if (line.trim() === "") continue;
  let req;
  try {
    req = JSON.parse(line);
    const f = ops[req.op];
    if (!f) throw new Error(`unknown op ${JSON.stringify(req.op)}`);
    reply({ op: req.op, ...(await f(req)) });
  } catch (err) {
    reply({ op: req?.op, error: String(err?.stack || err) });
  }
}
process.exit(0);
