-- workerinfo.lua: what a worker says about itself, for the dashboard (an extension).
--
--@ command worker.hello
--@ command worker.info
--
-- Commands (after `now`):
--   worker.hello  worker host pid queues-json  -> nil   (once when a worker starts)
--   worker.info   [worker...]                   -> JSON [{name, last_seen, host, pid, queues,
--                                                 started, done, failed}], most recent first
--
-- Keys:
--   ql:w:<worker>:info  hash  host, pid, queues (JSON text), started, done, failed
--                       (HSET, HGETALL, DEL; `done` is counted by complete.reserve and
--                       `failed` by fail, one HINCRBY each: worker.lua, job.lua)
--   ql:workers          zset  worker -> last seen (ZADD by hello, ZREVRANGE, ZSCORE)

Q.mod.workerinfo = function()
  local rcall = Q.rcall
  local C = Q.commands
  local MAX_INFO = 1000 -- workers reported by one call (the listing is not paged by the engine)

  local function info_key(worker) return KP .. 'w:' .. worker .. ':info' end

  C['worker.hello'] = { 'Hello', function(now, args)
    local worker = Q.worker(args[1])
    local host = args[2] or ''
    if #host > 255 or (host ~= '' and not host:match('^[\33-\126]+$')) then
      Q.fail('Arg "host" invalid: ' .. host)
    end
    local pid = Q.number('pid', args[3], 'not a number')
    if pid < 0 or pid ~= math.floor(pid) then Q.fail('Arg "pid" must be an integer >= 0') end
    if #(args[4] or '') > 8192 then Q.fail('Arg "queues" too large') end
    local queues = Q.json('queues', args[4])
    if type(queues) ~= 'table' or #queues > 100 then Q.fail('Arg "queues" must be a JSON list') end
    -- A restarted worker with the same name starts its counters again.
    rcall('DEL', info_key(worker))
    rcall('HSET', info_key(worker), 'host', host, 'pid', Q.int_arg(pid), 'queues', args[4],
      'started', Q.int_arg(math.floor(now)), 'done', 0, 'failed', 0)
    rcall('ZADD', K.workers, Q.time_arg(now), worker)
  end }

  C['worker.info'] = { 'WorkerInfo', function(now, args)
    local names = {}
    if #args > 0 then
      for i = 1, #args do table.insert(names, Q.worker(args[i])) end
      if #names > MAX_INFO then Q.fail('at most ' .. MAX_INFO .. ' workers') end
    else
      names = rcall('ZREVRANGE', K.workers, 0, MAX_INFO - 1)
    end
    local out = {}
    for _, w in ipairs(names) do
      local seen = rcall('ZSCORE', K.workers, w)
      local row = { name = w, last_seen = seen and tonumber(seen) or cjson.null }
      local flat = rcall('HGETALL', info_key(w))
      for i = 1, #flat, 2 do row[flat[i]] = flat[i + 1] end
      table.insert(out, row)
    end
    if #out == 0 then return '[]' end
    return cjson.encode(out)
  end }
end
