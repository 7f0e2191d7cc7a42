-- Two jobs on a cluster of two rack-agg nodes, driven the way an operator would:
-- create both (one per node), show that a wrong or missing token and a job's worker
-- reaching into the other job are refused, run both jobs' workers, check each job's
-- results are exact (bitwise its own single-process reference) and its counts are
-- right, stop one, finish the other, delete both.
--
--   rw-shell --connect NODE -f two_jobs.lua -- WORKER PROBE DIR
-- WORKER: rw-test-worker, PROBE: rw-test-probe, DIR: a scratch directory.

local worker, probe, dir = arg[1], arg[2], arg[3]
assert(worker and probe and dir, "usage: two_jobs.lua WORKER PROBE DIR")

-- Runs a command (bounded by timeout(1)); returns its exit code and output.
local function sh(cmd)
  local f = io.popen("timeout -k 5 60 " .. cmd .. " 2>&1; echo \"rc=$?\"")
  local out = f:read("a")
  f:close()
  return tonumber(out:match("rc=(%d+)%s*$")), out
end

local function read(path)
  local f = io.open(path)
  if not f then return nil end
  local text = f:read("a")
  f:close()
  return text
end

-- Polls fn() until it returns true, for at most `seconds`.
local function eventually(seconds, what, fn)
  for _ = 1, seconds * 10 do
    if fn() then return end
    rw.sleep(0.1)
  end
  error("timed out waiting for " .. what)
end

local nodes = rw.nodes()
assert(#nodes == 2, "expected 2 live nodes, got " .. #nodes)
local names = {}
for _, n in ipairs(nodes) do names[#names + 1] = n.name end
table.sort(names)

-- The fixture job's settings (tests/tools/fixture_job.hpp), with two optimizers so
-- the two jobs' exact results differ.
local function create(name, node, optimizer, workers)
  return rw.job_create{name = name, workers = workers, optimizer = optimizer, lr = 0.05,
                       momentum = 0.9, chunk_bytes = "4KiB", node = node}
end
local a = create("alpha-job", names[1], "momentum", 2)
local b = create("beta-job", names[2], "sum", 2)
assert(a.node == names[1] and b.node == names[2], "placement was not honoured")
assert(a.token ~= b.token and #a.token > 32, "each job has its own token")
assert(a.state == "created", "a new job waits for its workers: " .. a.state)
print(string.format("created %s (id %d) on %s and %s (id %d) on %s", a.name, a.id, a.node,
                    b.name, b.id, b.node))

local ok, err = pcall(create, "alpha-job", names[1], "sum", 1)
assert(not ok and err:find("exists already"), "a duplicate name is refused: " .. tostring(err))

local function worker_cmd(job, rank, optimizer, token, extra)
  return string.format("%s --connect %s --job %s --rank %d --workers 2 --optimizer %s "
                       .. "--steps 3 --out %s/%s-%d.bin %s%s", worker, job.endpoints[1],
                       job.name, rank, optimizer, dir, job.name, rank,
                       token and ("--token " .. token .. " ") or "", extra or "")
end

-- A wrong token and no token are refused.
local rc, out = sh(worker_cmd(a, 0, "momentum", "rwt1_" .. string.rep("0", 64)))
assert(rc == 2 and out:find("wrong token"), "a wrong token is refused: " .. out)
rc, out = sh(worker_cmd(a, 0, "momentum", nil))
assert(rc == 2 and out:find("needs its token"), "a missing token is refused: " .. out)
rc, out = sh(worker_cmd(a, 0, "momentum", b.token))
assert(rc == 2 and out:find("wrong token"), "another job's token is refused: " .. out)
print("wrong, missing and foreign tokens: refused")

-- Both jobs' workers, in the background; each writes its exit code to DIR/JOB-RANK.rc.
local function start(job, rank, optimizer, extra)
  local base = string.format("%s/%s-%d", dir, job.name, rank)
  os.execute(string.format("(timeout -k 5 90 %s > %s.log 2>&1; echo $? > %s.rc) &",
                           worker_cmd(job, rank, optimizer, job.token, "--verify " .. (extra or "")),
                           base, base))
end
for rank = 0, 1 do
  start(a, rank, "momentum")
  start(b, rank, "sum", "--hold-ms 60000") -- beta stays live until it is stopped
end

-- While beta runs, a worker of a third job reaches for beta's chunks: refused.
rw.wait("beta-job", 3, {timeout = 60})
local p = create("probe-job", names[2], "sum", 1)
rc, out = sh(string.format("%s --connect %s --job probe-job --token %s --target-job %d "
                           .. "--steal beta-job", probe, p.endpoints[1], p.token, b.id))
print(out)
assert(rc == 0, "a worker of one job cannot touch another job's chunks")

-- Alpha finishes on its own; both jobs' results are exact.
local fa = rw.wait("alpha-job", "finished", {timeout = 60})
for rank = 0, 1 do
  local base = string.format("%s/alpha-job-%d", dir, rank)
  eventually(30, base .. ".rc", function() return read(base .. ".rc") end)
  assert(tonumber(read(base .. ".rc")) == 0, "alpha rank " .. rank .. ": " .. read(base .. ".log"))
  assert(read(base .. ".log"):find("verified"), "alpha rank " .. rank .. " not exact")
  local b0 = string.format("%s/beta-job-%d.log", dir, rank)
  eventually(30, b0, function() return (read(b0) or ""):find("verified") end)
end
print("both jobs' results: bitwise their own single-process references")

-- Alpha's counts: 3 steps of 10 chunks (1000 + 5000 + 3333 floats in 1024-float chunks).
assert(#fa.ranks == 2, "alpha has two ranks")
for _, r in ipairs(fa.ranks) do
  assert(r.clock == 3, "rank " .. r.rank .. " clock " .. r.clock)
  assert(r.pushes == 30, "rank " .. r.rank .. " pushes " .. r.pushes)
  assert(r.bytes_in == 3 * 9333 * 4, "rank " .. r.rank .. " bytes_in " .. r.bytes_in)
  assert(r.bytes_out >= r.bytes_in, "rank " .. r.rank .. " bytes_out " .. r.bytes_out)
end
local sb = rw.job_status("beta-job")
assert(sb.state == "running" and sb.clock_min == 3, "beta runs at clock 3: " .. sb.state)

-- Stop beta (its workers are holding); delete both; the names are free again.
local stopped = rw.job_stop("beta-job")
assert(stopped.state == "stopped", "beta is stopped: " .. stopped.state)
for rank = 0, 1 do -- its holding workers hear of it
  local base = string.format("%s/beta-job-%d", dir, rank)
  eventually(30, base .. ".rc", function() return read(base .. ".rc") end)
  assert(tonumber(read(base .. ".rc")) == 7, "beta rank " .. rank .. ": " .. read(base .. ".log"))
  assert(read(base .. ".log"):find("stopped by an operator"), read(base .. ".log"))
end
rw.job_delete("alpha-job")
rw.job_delete("beta-job")
rw.job_delete("probe-job")
assert(#rw.jobs() == 0, "every job was deleted")
ok, err = pcall(rw.job_status, "alpha-job")
assert(not ok and err:find("no job named"), "a deleted job is unknown: " .. tostring(err))
print("beta stopped; jobs deleted")
print("two_jobs: ok")
