-- pop.lua: taking jobs from a queue: pop, peek, the lease reaper, lock invalidation.
-- Scheduled promotion is in timers.lua; listing and managing queues in queries.lua.
--
--@ needs objects queuescan
--@ command pop samples
--@ command peek
--@ command reap throttle samples
--
-- The known-empty marks and the queue lists held by id that worker.lua's reserves scan are
-- in queuescan.lua.
--
-- Commands (after `now`):
--   pop          queue worker count                 -> JSON array of job objects
--   peek         queue count [offset]               -> JSON array of job objects
--   reap         [queue...]                         -> JSON array of jids re-queued or failed
--                (extension: expired leases handled as a pop would, without popping)
--
-- Keys:
--   ql:q:<queue>-work|locks|scheduled|depends|recur|throttled  zset (ZRANGE*, ZADD, ZREM, ZCARD, ZCOUNT)
--   ql:q:<queue>-ratelimited, ql:rl:*   jobs over a rate limit, the limits (ratelimit.lua)
--   ql:j:<jid>                 hash  (HMGET, HSET, HDEL)
--   ql:j:<jid>-history         list  (via Q.history)
--   ql:paused_queues           set   (SISMEMBER, SADD, SREM)
--   ql:queues                  zset  (ZRANGE, ZREM)
--   ql:workers                 zset  (ZADD)
--   ql:w:<worker>:jobs         zset  (ZADD, ZREM)
--   ql:tracked                 zset  (ZSCORE)
--   ql:completed               zset  (ZREVRANGE)
--   ql:failures                set   (SMEMBERS, SREM)
--   ql:f:<group>               list  (LRANGE, LLEN, LTRIM)
--   ql:s:stats|wait|run:<day>:<queue>  hash (HMGET, HINCRBY, via Q.sample)
--   ql:config                  hash  (HMGET of the queue's options and of the hidden fields
--                                    #throttle:<q>, #due:<q>, #rate, #marks; HSET of them)
--   ql:th:ql:q:<queue>         hash  (EXISTS: is there a queue throttle)
--   channels: ql:log, ql:w:<worker>, ql:popped, ql:stalled, ql:failed, ql:wake:<queue>



Q.mod.pop = function()
  local rcall = Q.rcall
  local floor = math.floor
  local C = Q.commands


  Q.POP_FIELDS = { 'jid', 'klass', 'state', 'queue', 'worker', 'priority', 'expires', 'retries',
    'remaining', 'data', 'tags', 'failure', 'spawned_from_jid', 'throttles', 'history',
    'time', 'grace', 'held', 'tracked', 'visit' }

  -- Q.POP_FIELDS as a set (a constructor: under EVALSHA this runs on every call)
  local POP_FIELD = { jid = true, klass = true, state = true, queue = true, worker = true,
    priority = true, expires = true, retries = true, remaining = true, data = true, tags = true,
    failure = true, spawned_from_jid = true, throttles = true, history = true, time = true,
    grace = true, held = true, tracked = true, visit = true }

  -- Q.read(jid, Q.POP_FIELDS) with one HGETALL: a job hash is small and holds little else,
  -- and in its compact (listpack) encoding HMGET scans the whole hash for every field it
  -- asks for (six of them usually absent), where HGETALL walks it once. Other fields are
  -- dropped, so the table is what Q.read would return.
  function Q.read_pop(jid)
    local v = rcall('HGETALL', KP .. 'j:' .. jid)
    if not v[1] then return nil end
    -- (one constructor sizes the table for every field pop may set, instead of growing it)
    local h = { jid = nil, klass = nil, state = nil, queue = nil, worker = nil, priority = nil,
      expires = nil, retries = nil, remaining = nil, data = nil, tags = nil, failure = nil,
      spawned_from_jid = nil, throttles = nil, history = nil, time = nil, grace = nil,
      held = nil, tracked = nil, listed = nil, compact = nil, visit = nil }
    local any = false
    for i = 1, #v, 2 do
      local name = v[i]
      if POP_FIELD[name] then h[name] = v[i + 1]; any = true end
    end
    if not any then return nil end
    return h
  end

  local MARKS = Q.MARKS
  local set_mark, drop_mark = Q.set_mark, Q.drop_mark

  -- The field list of Q.pop_config, by completed job's queue ('' for none) and first queue to
  -- pop (0 for none); kept across calls as a Redis 7 function (bounded: a server holding many
  -- queues, or many shards of a cluster with a queue each, would otherwise build them anew).
  local names_of, nnames = {}, 0

  -- Read, with one HMGET, the config fields a pop from these queues needs first: the global
  -- options and the fields of the first queue (of several: the first not known to be empty;
  -- a queue popped after it reads its own, Q.pop_queue); `completing`: the queue of a job
  -- completed in the same call (complete.reserve), whose fields it adds.
  function Q.pop_config(queues, completing)
    local first = queues[1] or 0
    if queues[2] then
      -- (one queue: its fields cost no command of their own, and `pop`, the hand-off and
      -- the reaper, which never skip, name one)
      first = queues[Q.first_open(ctx.now, queues)] or 0
    end
    local by_queue = names_of[completing or '']
    local names = by_queue and by_queue[first]
    if not names then
      names = { MARKS }
      if first ~= 0 or completing then
        table.insert(names, 'heartbeat'); table.insert(names, 'grace-period')
        table.insert(names, 'max-job-history'); table.insert(names, '#idle-ttl')
        table.insert(names, '#rate')
      end
      if completing then
        table.insert(names, 'jobs-history'); table.insert(names, 'jobs-history-count')
        table.insert(names, '#completed-due'); table.insert(names, '#completed-count')
        table.insert(names, completing .. '-max-concurrency')
      end
      if first ~= 0 then
        local qn = Q.qn(first)
        if qn.maxc ~= names[#names] then table.insert(names, qn.maxc) end
        table.insert(names, qn.heartbeat)
        table.insert(names, qn.throttle)
        table.insert(names, qn.due)
      end
      if nnames >= 1024 then names_of, nnames = {}, 0 end
      by_queue = names_of[completing or '']
      if not by_queue then by_queue = {}; names_of[completing or ''] = by_queue end
      by_queue[first] = names
      nnames = nnames + 1
    end
    Q.load_config(names)
    if K.empty and ctx.cfgv[MARKS] ~= K.marks_tag then
      K.empty, K.nempty = nil, 0
      K.mark_gen = (K.mark_gen or 0) + 1
    end
  end

  -- Expired locks of a queue (lapse.lua: a module loaded when some are due, which most
  -- calls never see).
  local function invalidate(now, queue, count, selected, dead)
    Q.need('lapse')
    return Q.invalidate(now, queue, count, selected, dead)
  end

  -- Work-set scores that put recovered jobs (`selected`, in recovery order) ahead of every
  -- waiting job, first recovered first. One rule for both recoveries: a pop hands the jobs
  -- `invalidate` selects out before it looks at the work set, and the reaper, which has no
  -- worker to hand them to, queues them where that pop would have taken them. Timed-out
  -- (stalled) jobs keep their +inf score ahead of them.
  local function front_scores(queue, selected, now)
    local head = rcall('ZREVRANGEBYSCORE', Q.kq(queue, 'work'), '(+inf', '-inf',
      'WITHSCORES', 'LIMIT', 0, 1)
    local top = tonumber(head[2])
    local scores = {}
    for i = #selected, 1, -1 do
      local own = Q.score(tonumber(selected[i][2].priority) or 0, now)
      top = top and math.max(top + 1, own) or own
      scores[i] = top
    end
    return scores
  end

  local NO_TIDS = {}  -- (read only)

  -- Take up to `count` jobs from one queue for `worker`; appends job objects to `out`.
  -- Returns the number taken. `lean` job objects omit history and dependency sets; with
  -- `lean` 'flat', `out` is a flat reply (objects.lua) and each job's fields are appended.
  function Q.pop_queue(now, queue, worker, count, lean, out)
    local qn = Q.qn(queue)
    local mkey = qn.due
    -- (a queue after the first one Q.pop_config chose reads its fields here, with one HMGET)
    if not ctx.cfgv or ctx.cfgv[mkey] == nil then
      Q.load_config({ qn.heartbeat, qn.maxc, qn.throttle, mkey })
    end
    -- ql:paused_queues is read on every pop: other writers (qless-core) may pause or unpause.
    if rcall('SISMEMBER', K.paused_queues, queue) == 1 then drop_mark(queue); return 0 end
    -- Locks, schedules and spawns cannot be due before `due`: skip their scans until then.
    -- A bound further ahead than HORIZON was not written by this engine's rules (or comes from a
    -- client whose clock runs ahead): do not trust it.
    local due = Q.tonum(Q.cfgraw(mkey)) or 0
    local heads = nil
    if now >= due or due > now + Q.HORIZON then
      Q.need('timers')  -- (a module: at most once a HORIZON per busy queue)
      heads = Q.timer_heads(queue)
    end
    -- '#throttle' ('1'/'0') is re-checked whenever the timers are (at least once per HORIZON
    -- while the queue is busy), so a queue throttle written by another writer is seen too.
    local throttled = Q.cfgraw(qn.throttle)
    if heads or not throttled then
      local exists = rcall('EXISTS', KP .. 'th:ql:q:' .. queue) == 1 and '1' or '0'
      if exists ~= throttled then rcall('HSET', K.config, qn.throttle, exists) end
      throttled = exists
    end
    ctx.qth = ctx.qth or {}
    ctx.qth[queue] = throttled == '1'
    ctx.due = ctx.due or {}
    if not ctx.worker_seen then
      rcall('ZADD', K.workers, Q.time_arg(now), worker)
      ctx.worker_seen = true
    end
    local maxc = tonumber(Q.cfg(qn.maxc)) or 0
    if maxc > 0 then
      local running = rcall('ZCOUNT', qn.locks, now, '+inf')
      count = math.min(count, math.max(0, maxc - running))
      if count <= 0 then drop_mark(queue); return 0 end
    end
    -- Rate limits (ratelimit.lua: a module, loaded only in a keyspace where a limit is set,
    -- '#rate'): the queue's own caps the count; a job over any limit waits out of the work
    -- set for its window.
    local rating = ctx.cfgv['#rate']
    if rating == nil then rating = Q.cfgraw('#rate') end
    local kinds = false
    if rating then
      Q.need('ratelimit')
      local rated
      rated, kinds = Q.rate_flags(qn.rate)
      rating = rated or kinds
      if rated then
        count = Q.rate_room(now, queue, count, lean == true)
        if count <= 0 then drop_mark(queue); return 0 end
      end
    end
    local parked, nparked = nil, 0  -- (the earliest window of the jobs parked, how many)
    local selected = {}
    if heads and heads[1] <= now then invalidate(now, queue, count, selected) end
    local want = count - #selected
    local drained = false  -- ZPOPMAX emptied the work set
    if want > 0 then
      if heads and heads[2] <= now then Q.need('spawn'); Q.spawn(now, queue, want, false) end
      if heads and heads[3] <= now then Q.promote(now, queue, want, false) end
      if heads and heads[4] <= now then Q.need('ratelimit'); Q.rate_release(now, queue, false) end
      -- ZPOPMAX takes the highest scores first, ties in reverse member order: exactly
      -- ZREVRANGE + ZREM of what we examine (ghosts and throttled jobs leave work too).
      local work = qn.work
      local examined = 0
      local budget = count * 2
      while want > 0 and examined < budget do
        local asked = math.min(want, Q.CHUNK)
        -- ('1' as text for the usual single job: redis.call formats a number with printf)
        local popped = rcall('ZPOPMAX', work, asked == 1 and '1' or asked)
        local jids = {}
        for i = 1, #popped, 2 do jids[#jids + 1] = popped[i] end
        for _, jid in ipairs(jids) do
          examined = examined + 1
          local h = Q.read_pop(jid)
          local opening, budgets = nil, nil
          if h and rating then opening, budgets = Q.rate_check(h, queue, kinds, now) end
          if opening then
            Q.rate_park(jid, queue, opening)
            if not parked or opening < parked then parked = opening end
            -- (jobs parked cost the count nothing, up to a bound per call)
            nparked = nparked + 1
            if nparked <= 100 then budget = budget + 1 end
          elseif h then
            -- (no throttles of its own and no queue throttle: nothing to ask, no call)
            local tids = NO_TIDS
            if h.throttles or ctx.qth[queue] then
              Q.need('throttle')  -- (a module: most jobs and queues have no throttle)
              tids = Q.job_tids(queue, h.throttles)
            end
            local full = nil
            if #tids > 0 then full = Q.acquire(jid, tids, now) end
            if full then
              Q.throttle_job(jid, queue, full, now)
            else
              if #tids > 0 then h.held = cjson.encode(tids) end
              if budgets then Q.rate_take(jid, budgets, now) end
              table.insert(selected, { jid, h })
              want = want - 1
            end
          end
        end
        if #jids < asked then drained = true; break end
      end
      if nparked > 0 then
        Q.note_timer(queue, parked, nil)
        -- (stopped with work left: the queue is due again at once)
        if not drained and want > 0 then Q.rate_busy(queue) end
      end
    end
    local taken = 0
    local expires, expires_s
    if selected[1] then
      expires = Q.lease_end(now, Q.heartbeat(queue))
      -- Formatted once for the HSET and both ZADDs (redis.call would format it for each,
      -- with the same '%.17g').
      expires_s = string.format('%.17g', expires)
    end
    local scored = {}  -- (expiry, jid) of each job taken: one ZADD per set for them all
    for _, item in ipairs(selected) do
      local jid, h = item[1], item[2]
      -- The first pop of a job in its implied first visit (no history field, no `visit`,
      -- no list) writes `visit` in the HSET below; any other pop appends to the list.
      local visit, parts
      local first = not h.history and not h.visit
        and rcall('EXISTS', Q.khist(jid)) == 0
      local t = tonumber(h.time)  -- (parsed once for the visit and the wait sample)
      if first then visit, parts = Q.visit_popped(t, h.queue, now, worker) end
      local cleared = false
      if not visit then
        local prior = nil
        if first or h.visit then prior = Q.visit_entries(h.visit, h.time, h.queue) end
        cleared = h.history ~= nil and h.history ~= '[]'
        h.listed = Q.history_text(jid, Q.popped_entry(now, worker), h.history, true, prior)
        if h.visit then rcall('HDEL', Q.kjob(jid), 'visit') end
      end
      h.history, h.visit = nil, nil
      h.compact = parts
      Q.sample('wait', queue, now, now - (t or now))
      local fields = { 'worker', worker, 'expires', expires_s, 'state', 'running',
        'time', Q.ftime(now) }
      if h.remaining then table.insert(fields, 'remaining'); table.insert(fields, h.remaining) end
      if visit then table.insert(fields, 'visit'); table.insert(fields, visit) end
      if cleared then table.insert(fields, 'history'); table.insert(fields, '[]') end
      if h.held then table.insert(fields, 'held'); table.insert(fields, h.held) end
      rcall('HSET', Q.kjob(jid), unpack(fields))
      if h.grace then rcall('HDEL', Q.kjob(jid), 'grace'); h.grace = nil end
      scored[#scored + 1] = expires_s
      scored[#scored + 1] = jid
      local tracked = h.tracked == true or h.tracked == '1'
      if tracked then Q.publish(K.popped, jid) end
      h.worker = worker
      h.expires = expires
      h.state = 'running'
      if lean == 'flat' then
        Q.job_fields(out, jid, h, tracked, expires_s)
      else
        table.insert(out, Q.job_object(jid, h, tracked, lean))
      end
      taken = taken + 1
    end
    if taken > 0 then
      rcall('ZADD', Q.kwjobs(worker), unpack(scored))
      rcall('ZADD', qn.locks, unpack(scored))
    end
    local newdue = due
    if heads then
      -- The heads read before this pop stay lower bounds (it only removed or raised entries);
      -- anything left over because of count limits keeps the bound <= now: rescan next pop.
      newdue = math.min(now + Q.HORIZON, heads[1], heads[2], heads[3], heads[4])
    end
    if parked and parked < newdue then newdue = parked end
    if taken > 0 then
      if expires < newdue then newdue = expires end
      -- News to idle workers? Only if a registration may outlast the lock by its grace
      -- period; none can when the longest ttl ever registered here ('#idle-ttl') is shorter.
      local grace = Q.cfgnum('grace-period', 10)
      local ttl = Q.tonum(Q.cfgraw('#idle-ttl'))
      if ttl and now + ttl > expires + grace then Q.note_timer(queue, expires, grace) end
    end
    if newdue ~= due then rcall('HSET', K.config, mkey, newdue) end
    due = newdue
    ctx.due[queue] = due
    if drained and due > now then
      local at = nil
      if heads then
        at = math.min(heads[1], heads[2], heads[3], heads[4])
        if taken > 0 and expires < at then at = expires end
      end
      if at and parked and parked < at then at = parked end
      set_mark(queue, due, at)
    else
      drop_mark(queue)
    end
    return taken
  end

  C['pop'] = { 'Pop', function(now, args)
    local queue = Q.queue(args[1])
    local worker = Q.worker(args[2])
    local count = Q.count(args[3], 1, 1000)
    Q.pop_config({ queue })
    local out = {}
    Q.pop_queue(now, queue, worker, count, false, out)
    return cjson.encode(out)
  end }

  -- Extension: the periodic reaper. Expired leases of the named queues (all known queues when
  -- none are named) get what a pop would give them (courtesy notice, then retry or failure),
  -- but a job whose grace ran out goes back to waiting instead of to a worker, so queues nobody
  -- pops recover too (and free their throttle slots). At most REAP_LIMIT jobs per queue per call.
  local REAP_LIMIT = 100

  -- A lease never outlives what the configuration now allows: one ending after now + the
  -- queue's current heartbeat (granted under a longer or unbounded option) is cut to that, so
  -- it expires, and is recovered, as if granted now. A live owner's next heartbeat renews it.
  local function cut_leases(now, queue, locks)
    local tail = rcall('ZREVRANGE', locks, 0, 0, 'WITHSCORES')
    if not tail[2] or tonumber(tail[2]) <= now + 1 then return end  -- (heartbeat >= 1)
    Q.pop_config({ queue })
    local seconds = Q.heartbeat(queue)
    local jids = rcall('ZRANGEBYSCORE', locks, '(' .. (now + seconds), '+inf', 'LIMIT', 0, REAP_LIMIT)
    if #jids == 0 then return end
    local expires = Q.lease_end(now, seconds)
    for _, jid in ipairs(jids) do
      local worker = rcall('HGET', Q.kjob(jid), 'worker')
      rcall('ZADD', locks, expires, jid)
      if worker and worker ~= '' then
        rcall('HSET', Q.kjob(jid), 'expires', expires)
        rcall('ZADD', Q.kwjobs(worker), expires, jid)
      end
    end
    Q.lower_due(queue, expires, 0)
  end

  C['reap'] = { 'Reap', function(now, args)
    local queues = {}
    for i = 1, #args do queues[i] = Q.queue(args[i]) end
    if #queues == 0 then queues = rcall('ZRANGE', K.queues, 0, -1) end
    local out = {}
    for _, queue in ipairs(queues) do
      local locks = Q.kq(queue, 'locks')
      cut_leases(now, queue, locks)
      local head = rcall('ZRANGE', locks, 0, 0, 'WITHSCORES')
      if head[2] and tonumber(head[2]) <= now then
        Q.pop_config({ queue })
        local selected = {}
        invalidate(now, queue, REAP_LIMIT, selected, out)
        local scores = front_scores(queue, selected, now)
        for i, item in ipairs(selected) do
          local jid, h = item[1], item[2]
          rcall('ZREM', locks, jid)
          rcall('ZADD', Q.kq(queue, 'work'), scores[i], jid)
          local fields = { 'state', 'waiting', 'worker', '', 'expires', 0, 'remaining', h.remaining }
          if h.held then table.insert(fields, 'held'); table.insert(fields, '') end
          rcall('HSET', Q.kjob(jid), unpack(fields))
          Q.release(jid, h.held, now)
          Q.wake(queue)
          table.insert(out, jid)
        end
        -- A courtesy notice moved locks to now + grace: keep the pop's timer bound below it.
        Q.lower_due(queue, now + Q.cfgnum('grace-period', 10), 0)
      end
    end
    if #out == 0 then return '[]' end
    return cjson.encode(out)
  end }

  C['peek'] = { 'Peek', function(now, args)
    local queue = Q.queue(args[1])
    local count = Q.count(args[2], 0, 500)
    local offset = Q.offset('offset', args[3])
    local out = {}
    if count == 0 then return cjson.encode(out) end
    local jids = {}
    if offset == 0 then
      jids = rcall('ZRANGEBYSCORE', Q.kq(queue, 'locks'), '-inf', now, 'LIMIT', 0, count)
    end
    local want = count - #jids
    if want > 0 then
      Q.need('spawn,timers')
      Q.spawn(now, queue, want, true)
      Q.promote(now, queue, want, true)
      for _, jid in ipairs(rcall('ZREVRANGE', Q.kq(queue, 'work'), offset, offset + want - 1)) do
        table.insert(jids, jid)
      end
    end
    for _, jid in ipairs(jids) do
      local job = Q.get(jid)
      if job then table.insert(out, job) end
    end
    return cjson.encode(out)
  end }
end
