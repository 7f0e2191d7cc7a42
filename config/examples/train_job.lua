-- An rw-shell script: create a job, start its workers, watch it train, wait for it to
-- finish and print its summary.
--
--   rw-shell --connect NODE -f config/examples/train_job.lua -- [DEMO] [WORKERS] [STEPS]
--
-- DEMO is the worker program (default build/apps/examples/rw-train-demo, which trains
-- a small MLP on two spirals with Adam run on the node), WORKERS its processes
-- (default 4), STEPS the training steps (default 300). NODE is any node's --listen
-- address. The workers' logs go to a scratch directory, shown at the end.

local demo = arg[1] or "build/apps/examples/rw-train-demo"
local workers = math.tointeger(tonumber(arg[2] or "4"))
local steps = math.tointeger(tonumber(arg[3] or "300"))
assert(workers and workers > 0, "WORKERS must be a positive whole number")
assert(steps and steps > 0, "STEPS must be a positive whole number")

local function capture(cmd)
  local f = assert(io.popen(cmd))
  local out = f:read("a")
  f:close()
  return (out:gsub("%s+$", ""))
end

-- The job: what the workers will declare must match (rw-train-demo: Adam, lr 0.03,
-- averaged gradients, the default chunk size).
local name = string.format("spirals-%d-%d", os.time(), math.random(1000, 9999))
local job = rw.job_create{name = name, workers = workers, optimizer = "adam", lr = 0.03}
print(string.format("job %s (id %d) created on node %s; workers connect to %s",
                    job.name, job.id, job.node, job.endpoints[1]))

-- The token goes to the workers in a file only its owner reads (mktemp -d makes the
-- directory 0700), not on their command lines, which every user can see.
local dir = capture("mktemp -d")
local token_file = dir .. "/token"
local f = assert(io.open(token_file, "w"))
f:write(job.token, "\n")
f:close()
for rank = 0, workers - 1 do
  local base = string.format("%s/rank-%d", dir, rank)
  os.execute(string.format("(%s --connect %s --rank %d --workers %d --steps %d --job %s "
                           .. "--token-file %s > %s.log 2>&1; echo $? > %s.rc) &",
                           demo, job.endpoints[1], rank, workers, steps, job.name,
                           token_file, base, base))
end

rw.wait(name, "running", {timeout = 60})
local final = rw.watch(name, {interval = 1}) -- until the job ends
if final.state ~= "finished" then
  error(string.format("job %s %s: %s", name, final.state, final.reason))
end

-- Every worker's exit code (they write it as they exit, just after the job ends).
local failed = 0
for rank = 0, workers - 1 do
  local base = string.format("%s/rank-%d", dir, rank)
  local rc
  for _ = 1, 100 do
    local f = io.open(base .. ".rc")
    if f then rc = tonumber(f:read("a")); f:close() end
    if rc then break end
    rw.sleep(0.1)
  end
  if rc ~= 0 then
    failed = failed + 1
    print(string.format("rank %d failed (exit %s):\n%s", rank, tostring(rc),
                        capture("cat " .. base .. ".log")))
  end
end

print(string.format("\njob %s finished: %d workers, %d steps each", name, workers,
                    final.clock_min))
print(string.format("%-5s %7s %9s %9s %12s %12s %10s", "rank", "clock", "pushes", "pulls",
                    "bytes in", "bytes out", "wait ms"))
for _, r in ipairs(final.ranks) do
  print(string.format("%-5d %7d %9d %9d %12d %12d %10.1f", r.rank, r.clock, r.pushes,
                      r.pulls, r.bytes_in, r.bytes_out, r.wait_ms))
end
print(capture("tail -n 1 " .. dir .. "/rank-0.log"))
rw.job_delete(name)
os.execute("rm -rf " .. dir)
if failed > 0 then
  error(string.format("%d worker(s) failed", failed))
end
