-- worker.lua: worker listings and the worker's hot path (reserve, complete.reserve).
--
--@ command workers
--@ command worker.deregister
--@ command reserve samples pop
--@ command reserve.wait samples pop handoff
--@ command complete.reserve samples complete pop
--
-- Commands (after `now`):
--   workers            [worker]                          -> JSON
--   worker.deregister  worker...                         -> nil
--   reserve            worker count queue...             -> flat reply (objects.lua): jobs, wake
--                      (queue...: names, `@<id>` names (held under id), or `@<id>`: queuescan.lua)
--   reserve.wait       worker ttl count queue...         -> as reserve; when nothing is ready,
--                      the worker waits for a hand-off on those queues for ttl s (handoff.lua)
--   complete.reserve   jid worker queue data token count queue... -> flat reply: state, jobs, wake
--                      (token: the attempt token or ''; a repeat after a lost reply returns the
--                      recorded state and the jobs the worker holds)
--   complete.reserve   +N (jid queue data token){N} jid worker queue data token count queue...
--                      paired form: completes N more jobs of `worker` first (complete.lua); the
--                      state is each job's result in order, separated by 0x1E ('!' and the
--                      error text for a job no longer the worker's, left alone). Every argument
--                      is checked before anything is written.
--
-- Keys:
--   ql:workers             zset  worker -> last seen (ZRANGEBYSCORE, ZREVRANGE, ZREM, ZADD)
--   ql:wg:<group>          hash  (HMGET seen members: a worker its group still beats for is
--                                kept; DEL with the worker of that name)
--   ql:w:<worker>:jobs     zset  jid -> lock expiry (ZREVRANGEBYSCORE, ZCOUNT, DEL)
--   ql:w:<worker>:info     hash  (HINCRBY done in complete.reserve; DEL with the worker)
--   ql:q:<queue>-scheduled|recur|locks  zset (ZRANGE 0 0 WITHSCORES, for the wake hint)
--   ql:paused_queues       set   (SISMEMBER, wake hint skips paused queues)
--   ql:config              hash  (HSET #due:<queue> with the exact bound on the idle path)
--   everything pop and complete touch (pop.lua, complete.lua)


Q.mod.worker = function()
  local rcall = Q.rcall
  local C = Q.commands
  local floor = math.floor


  -- Forget (bounded work) workers unseen for `max-worker-age` seconds: neither their own calls
  -- nor their group's beats (workerinfo.lua); one still beating for is seen again instead.
  -- Their job sets and info go; the jobs' histories keep their names.
  function Q.collect_workers(now)
    local age = Q.cfgnum('max-worker-age', 86400)
    local old = rcall('ZRANGEBYSCORE', K.workers, 0, now - age, 'LIMIT', 0, 100)
    local dead = {}
    for _, w in ipairs(old) do
      local info = KP .. 'w:' .. w .. ':info'
      local group = rcall('HGET', info, 'group') or w
      local gkey = KP .. 'wg:' .. group
      local g = rcall('HMGET', gkey, 'seen', 'members')
      local beat = tonumber(g[1])
      local named = group == w or (' ' .. (g[2] or '') .. ' '):find(' ' .. w .. ' ', 1, true)
      if beat and named and beat > now - age then
        rcall('ZADD', K.workers, beat, w)
      else
        rcall('DEL', Q.kwjobs(w), info)
        -- (the group's beats stopped too: a supervisor or serial worker gone without a word)
        if not (beat and beat > now - age) then rcall('DEL', gkey) end
        dead[#dead + 1] = w
      end
    end
    if #dead > 0 then Q.chunked('ZREM', K.workers, dead) end
  end

  C['workers'] = { 'Workers', function(now, args)
    Q.collect_workers(now)
    if args[1] then
      local key = Q.kwjobs(Q.worker(args[1]))
      return cjson.encode({
        jobs = rcall('ZREVRANGEBYSCORE', key, now + 8640000, now),
        stalled = rcall('ZREVRANGEBYSCORE', key, now, 0),
      })
    end
    local out = {}
    for _, w in ipairs(rcall('ZREVRANGE', K.workers, 0, -1)) do
      table.insert(out, {
        name = w,
        jobs = rcall('ZCOUNT', Q.kwjobs(w), now, now + 8640000),
        stalled = rcall('ZCOUNT', Q.kwjobs(w), 0, now),
      })
    end
    return cjson.encode(out)
  end }

  C['worker.deregister'] = { 'Deregister', function(now, args)
    local names = {}
    for i = 1, #args do table.insert(names, Q.worker(args[i])) end
    if #names == 0 then Q.fail('Arg "worker" missing') end
    if #names > Q.MAX_LIST then Q.fail('at most ' .. Q.MAX_LIST .. ' workers') end
    Q.chunked('ZREM', K.workers, names)
    -- (its info, and the beats of the group it leads: workerinfo.lua)
    for _, w in ipairs(names) do rcall('DEL', KP .. 'w:' .. w .. ':info', KP .. 'wg:' .. w) end
  end }

  -- Seconds until something may become ready in these queues (-1 if nothing is pending).
  -- Idle path only: the exact earliest lock expiry, scheduled time or spawn time of the
  -- (unpaused) queues; also tightens each queue's '#due' bound to that exact value.
  local function wake_hint(now, queues)
    local best = math.huge
    local marks = K.empty
    for _, queue in ipairs(queues) do
      -- A known-empty queue (pop.lua; skipped or drained by this call) keeps its `#due`; its
      -- earliest timer is remembered, or read once.
      local m = marks and marks[queue]
      if m then
        if not m.at then
          Q.need('timers')
          local heads = Q.timer_heads(queue)
          m.at = math.min(heads[1], heads[2], heads[3], heads[4])
        end
        if m.at < best then best = m.at end
      -- (a queue with a `#due` noted by this call's pop passed its pause check already)
      elseif (ctx.due and ctx.due[queue]) or rcall('SISMEMBER', K.paused_queues, queue) == 0 then
        Q.need('timers')  -- (a module, as in Q.pop_queue)
        local heads = Q.timer_heads(queue)
        local exact = math.min(heads[1], heads[2], heads[3], heads[4])
        -- (a full rate limit opens at a time no set holds: ratelimit.lua)
        local opens = ctx.rl and Q.rate_due(queue)
        if opens and opens < exact and rcall('EXISTS', Q.qn(queue).work) == 1 then
          exact = math.max(opens, now)
        end
        local bound = math.min(exact, now + Q.HORIZON)
        -- The stored bound stays if it is still one (ahead of now, not past the earliest
        -- timer): an idle reserve over many empty queues writes nothing.
        local stored = ctx.due and ctx.due[queue]
        if not (stored and stored > now and stored <= exact) then
          rcall('HSET', K.config, Q.mfield('due', queue), bound)
          if ctx.due then ctx.due[queue] = bound end
        end
        if exact < best then best = exact end
      end
    end
    if best == math.huge then return -1 end
    return math.max(0, best - now)
  end

  -- Pop up to `count` jobs from the queues in order into `reply`, a flat reply
  -- (objects.lua); returns it, with the wake hint when no job came.
  local function reserve(now, worker, count, queues, reply)
    local left = count
    -- (the queues before the first not known to be empty cost nothing, not even a look at
    -- their marks when the last call over this held list saw them: queuescan.lua)
    for i = queues[2] and Q.first_open(now, queues) or 1, #queues do
      if left <= 0 then break end
      local queue = queues[i]
      -- (a queue known to be empty costs no Redis command: pop.lua)
      if not Q.known_empty(now, queue) then
        left = left - Q.pop_queue(now, queue, worker, left, 'flat', reply)
      end
    end
    -- (tostring prints %.14g, as cjson does)
    if left == count then reply[3] = tostring(wake_hint(now, queues)) end
    return reply
  end

  C['reserve'] = { 'Reserve', function(now, args)
    local worker = Q.worker(args[1])
    local count = Q.count(args[2], 1, 1000)
    local queues = Q.queue_list(args, 3)
    Q.pop_config(queues)
    return reserve(now, worker, count, queues, Q.flat_reply(nil, worker))
  end }

  -- Whether the queues this engine knows to be empty still have no job ready. A worker
  -- registers as idle after this look and then sleeps until a hand-off or a wake-up, so it
  -- must not rest on a mark: another writer's put (another engine version during a rolling
  -- upgrade, a qless-core client) cannot end this engine's marks, and its wake-up may have
  -- come before this call. One EXISTS over the marked queues' work sets; if any holds a job,
  -- their marks are dropped.
  local function still_empty(now, queues)
    local marked, keys = {}, {}
    for _, queue in ipairs(queues) do
      if Q.known_empty(now, queue) then
        marked[#marked + 1] = queue
        keys[#keys + 1] = Q.qn(queue).work
      end
    end
    if #keys == 0 or rcall('EXISTS', unpack(keys)) == 0 then return true end
    for _, queue in ipairs(marked) do Q.drop_mark(queue) end
    return false
  end

  C['reserve.wait'] = { 'Reserve', function(now, args)
    local worker = Q.worker(args[1])
    local ttl = Q.number('ttl', args[2], 'missing or not a number')
    if ttl <= 0 or ttl > 3600 then Q.fail('Arg "ttl" must be > 0 and <= 3600: ' .. args[2]) end
    local count = Q.count(args[3], 1, 1000)
    local queues = Q.queue_list(args, 4)
    Q.pop_config(queues)
    local reply = reserve(now, worker, count, queues, Q.flat_reply(nil, worker))
    if reply[3] ~= '' and not still_empty(now, queues) then
      reply = reserve(now, worker, count, queues, Q.flat_reply(nil, worker))
    end
    if reply[3] == '' then
      Q.idle_forget(worker)
    else
      Q.idle_register(now, worker, ttl, queues)
    end
    return reply
  end }

  -- Append the running jobs `worker` holds to a flat reply (the replay of a lost reply);
  -- returns how many.
  local function held_jobs(now, worker, reply)
    local n = 0
    for _, jid in ipairs(rcall('ZRANGEBYSCORE', Q.kwjobs(worker), now, '+inf', 'LIMIT', 0, 1000)) do
      local h = Q.read_pop(jid)
      if h and h.state == 'running' and h.worker == worker then
        Q.job_fields(reply, jid, h, h.tracked == '1', h.expires)
        n = n + 1
      end
    end
    return n
  end

  -- ql:workers is re-scored at most once a second per worker by complete.reserve (a ZADD on a
  -- small listpack zset parses and formats its scores: ~20k instructions a job). Per server,
  -- across calls (a Redis 7 function keeps this table; each EVALSHA starts with it empty):
  -- keyspace prefix .. worker (worker names hold no ':') -> { second of the ZADD, the
  -- `done` count of the info hash after the last call }. The entry only counts while the
  -- call's HINCRBY of `done` returns the next number: a deleted info hash (worker.deregister,
  -- the collection of old workers, FLUSHDB, another database) starts again at 1 and forces
  -- the ZADD.
  local fresh, nfresh = {}, 0

  -- True when this worker's ql:workers entry was written this second by this engine.
  -- (`n`: the jobs this call completed, the step of `done`)
  local function registry_fresh(now, worker, done, n)
    local m = fresh[KP .. worker]
    return m ~= nil and m[1] == floor(now) and m[2] + n == done
  end

  -- Remember what the call did to the registry (`skip`: it left it; else pop's ZADD, if any).
  local function registry_note(now, worker, done, skip)
    local name = KP .. worker
    if skip then
      fresh[name][2] = done
    elseif ctx.worker_seen then
      if nfresh >= 1024 then fresh, nfresh = {}, 0 end
      if not fresh[name] then nfresh = nfresh + 1 end
      fresh[name] = { floor(now), done }
    else
      fresh[name] = nil
    end
  end

  C['complete.reserve'] = { 'Complete', function(now, args)
    -- (the paired form: its earlier completions, checked; nothing written yet)
    local earlier, rest = Q.earlier_args(args)
    if earlier then args = rest end
    local jid = Q.jid(args[1])
    local worker = Q.worker(args[2])
    local queue = Q.queue(args[3])
    local own = Q.read_own(jid)  -- (a read: nothing is written before the checks below)
    local data = Q.data_arg(args[4], own)
    local token = Q.token(args[5])
    local count = Q.count(args[6], 0, 1000)
    local queues = {}
    if count > 0 then queues = Q.queue_list(args, 7) end
    local h, recorded, lost, batch
    local states, completed = '', 0
    if earlier then
      batch = Q.complete_batch()
      -- (the paired form reports this job lost rather than refusing the others with it)
      Q.earlier_distinct(earlier, jid)
      h, recorded, lost = Q.check_own(jid, worker, queue, token, own)
      -- (the config the completions read too, in one HMGET: else each reads it lazily)
      if not recorded then Q.pop_config(queues, queue) end
      states, completed = Q.complete_earlier(now, worker, earlier, batch)  -- (the first write)
      if recorded then recorded = states .. recorded end
    else
      h, recorded = Q.check_running(jid, worker, queue, token, nil, own)
    end
    if recorded then
      if batch then Q.finish_batch(now, worker, batch) end  -- (the earlier ones just done)
      -- Replayed after a lost reply: the jobs that call reserved are held by `worker` now.
      local reply = Q.flat_reply(recorded, worker)
      if held_jobs(now, worker, reply) == 0 then reply[3] = '0' end
      return reply
    end
    if not earlier then Q.pop_config(queues, queue) end
    local state = states .. (lost or Q.complete(now, h,
      { jid = jid, worker = worker, queue = queue, data = data, token = token, batch = batch }))
    if batch then Q.finish_batch(now, worker, batch) end
    if not lost then completed = completed + 1 end
    -- (the dashboard's count, workerinfo.lua; '1' as text: redis.call formats a number with printf)
    local done, skip
    if completed > 0 then  -- (none: every job of a paired call lost; no info hash made)
      done = rcall('HINCRBY', KP .. 'w:' .. worker .. ':info', 'done',
        completed == 1 and '1' or tostring(completed))
      skip = registry_fresh(now, worker, done, completed)
      if skip then ctx.worker_seen = true end
    end
    local reply = Q.flat_reply(state, worker)
    if count == 0 then
      reply[3] = '-1'
    else
      reserve(now, worker, count, queues, reply)
    end
    if done then registry_note(now, worker, done, skip) end
    return reply
  end }
end
