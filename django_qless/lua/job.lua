-- job.lua: commands acting on one job (or a list of jobs).
--
-- Commands (after `now`), this file also holds depends/priority/log/get/multiget/tag/track
-- (listed in the "job metadata" section below); put/requeue/put.many are in put.lua:
--   complete  jid worker queue data [next q] [delay d] [depends JSON] [token t] -> state text
--   fail      jid worker group message [data [token]]               -> jid
--   retry     jid queue worker [delay] [group] [message] [token]    -> remaining (integer)
--   release   jid worker        (extension: back to waiting, no retry spent) -> 'waiting'
--   heartbeat jid worker [data]                                     -> new expiry (integer)
--   timeout   jid...                                                -> nil
--   cancel    jid...                                                -> array of the jids
--
-- Keys:
--   ql:j:<jid>                 hash  job record (HMGET, HSET, HDEL, DEL); field `tracked` ('1')
--                                    mirrors ql:tracked, `held` lists throttles acquired at pop
--   ql:j:<jid>-history         list  (RPUSH via Q.history, DEL)
--   ql:j:<jid>-dependencies    set   jids this job waits for (SADD, SREM, SMEMBERS, DEL)
--   ql:j:<jid>-dependents      set   jids waiting for this job (SADD, SREM, SMEMBERS, DEL)
--   ql:q:<queue>-work|locks|scheduled|depends|throttled  zset (ZADD, ZREM)
--   ql:queues                  zset  (ZADD NX)
--   ql:w:<worker>:jobs         zset  (ZADD, ZREM)
--   ql:workers                 zset  (ZADD, heartbeat)
--   ql:completed               zset  (ZADD, ZREM, ZRANGEBYSCORE, ZCARD, ZRANGE)
--   ql:tracked                 zset  (ZADD, ZREM; track/untrack/cancel/expiry)
--   ql:t:<tag>, ql:tags        zset  (ZADD, ZREM, ZINCRBY)
--   ql:failures                set   (SADD, SREM)
--   ql:f:<group>               list  (LPUSH, LREM, LLEN)
--   ql:s:stats|run:<day>:<queue>  hash  (HINCRBY; run stats via Q.sample)
--   ql:r:<jid>                 hash  (EXISTS, recurring-collision check in put)
--   ql:config                  hash  (HMGET; HGET/HSET of #due:<queue> and #completed-due)
--   channels: ql:log, ql:w:<worker>, ql:put, ql:completed, ql:failed, ql:canceled, ql:wake:<q>


Q.mod.job = function()
  local rcall = Q.rcall
  local floor = math.floor
  local C = Q.commands


  -- A running job left `queue`: with a concurrency cap, idle workers may now take another.
  function Q.slot_freed(queue)
    if (tonumber(Q.cfg(Q.qn(queue).maxc)) or 0) > 0 then Q.wake(queue) end
  end

  -- Remove a job from the queue sets its state says it is in (all of them if unsure).
  function Q.unqueue(jid, queue, state, throttles)
    if not queue or queue == '' then return end
    if state == 'waiting' then
      -- qless-core leaves a job advanced with a delay `waiting` inside -scheduled
      rcall('ZREM', Q.kq(queue, 'work'), jid)
      rcall('ZREM', Q.kq(queue, 'scheduled'), jid)
    elseif state == 'running' then
      rcall('ZREM', Q.kq(queue, 'locks'), jid)
    elseif state == 'stalled' then
      rcall('ZREM', Q.kq(queue, 'work'), jid)
      rcall('ZREM', Q.kq(queue, 'locks'), jid)
    elseif state == 'scheduled' then
      rcall('ZREM', Q.kq(queue, 'scheduled'), jid)
    elseif state == 'depends' then
      rcall('ZREM', Q.kq(queue, 'depends'), jid)
    elseif state == 'throttled' then
      Q.unpend(jid, queue, throttles)
    elseif state ~= 'failed' and state ~= 'complete' then
      for _, kind in ipairs({ 'work', 'locks', 'scheduled', 'depends' }) do
        rcall('ZREM', Q.kq(queue, kind), jid)
      end
      Q.unpend(jid, queue, throttles)
    end
  end

  -- Drop a failed job from its failure group and from the `failed` count of the day and
  -- queue it failed in.
  function Q.unfailed(jid, failure_text, queue)
    local ok, f = pcall(cjson.decode, failure_text or '')
    local group = ok and type(f) == 'table' and f.group or nil
    if not group then return end
    local key = 'ql:f:' .. group
    rcall('LREM', key, 0, jid)
    if rcall('LLEN', key) == 0 then rcall('SREM', 'ql:failures', group) end
    if queue and queue ~= '' and tonumber(f.when) then Q.counter(queue, tonumber(f.when), 'failed', -1) end
  end

  -- Register dependencies that exist and are not complete; returns how many were added.
  function Q.add_deps(jid, deps)
    local added = 0
    for _, d in ipairs(deps) do
      local state = rcall('HGET', Q.kjob(d), 'state')
      if state and state ~= 'complete' then
        rcall('SADD', Q.kdents(d), jid)
        rcall('SADD', Q.kdeps(jid), d)
        added = added + 1
      end
    end
    return added
  end

  -- Make a job that left `depends` eligible: scheduled time if one was remembered, else work.
  function Q.undepend(jid, h, now)
    local queue = h.queue
    rcall('ZREM', Q.kq(queue, 'depends'), jid)
    local at = tonumber(h.scheduled)
    if at then
      rcall('ZADD', Q.kq(queue, 'scheduled'), at, jid)
      Q.lower_due(queue, at)
      rcall('HSET', Q.kjob(jid), 'state', 'scheduled')
      rcall('HDEL', Q.kjob(jid), 'scheduled')
    else
      rcall('ZADD', Q.kq(queue, 'work'), Q.score(tonumber(h.priority) or 0, now), jid)
      rcall('HSET', Q.kjob(jid), 'state', 'waiting')
      if h.scheduled then rcall('HDEL', Q.kjob(jid), 'scheduled') end
      Q.wake(queue)
    end
  end

  -- Delete a job's keys and index entries (completed-job expiry).
  function Q.delete_job(jid)
    local tags = rcall('HGET', Q.kjob(jid), 'tags')
    for _, tag in ipairs(Q.list(tags)) do Q.tag_remove(jid, tag) end
    rcall('DEL', Q.kjob(jid), Q.khist(jid), Q.kdeps(jid), Q.kdents(jid))
    rcall('ZREM', 'ql:tracked', jid)
  end

  -- Completed-job retention: at most 500 deletions per call.
  function Q.expire_completed(now)
    local budget = Q.CHUNK
    local age = Q.cfgnum('jobs-history', 604800)
    -- '#completed-due': no completed job can be older than jobs-history before this time; it is
    -- at most HORIZON ahead, so completions recorded by another writer are seen within it.
    local due = Q.tonum(Q.cfgraw('#completed-due'))
    local jids = {}
    if due == nil or now >= due or due > now + Q.HORIZON then
      jids = rcall('ZRANGEBYSCORE', 'ql:completed', '-inf', now - age, 'LIMIT', 0, budget)
      for _, jid in ipairs(jids) do Q.delete_job(jid) end
      if #jids > 0 then Q.chunked('ZREM', 'ql:completed', jids) end
      local next_due = now
      if #jids < budget then
        next_due = now + Q.HORIZON
        local first = rcall('ZRANGE', 'ql:completed', 0, 0, 'WITHSCORES')
        local oldest = tonumber(first[2])
        if oldest and oldest + age < next_due then next_due = math.max(oldest + age, now) end
      end
      rcall('HSET', 'ql:config', '#completed-due', next_due)
    end
    budget = budget - #jids
    local keep = Q.cfgnum('jobs-history-count', 50000)
    local excess = rcall('ZCARD', 'ql:completed') - keep
    if excess > 0 and budget > 0 then
      jids = rcall('ZRANGE', 'ql:completed', 0, math.min(excess, budget) - 1)
      for _, jid in ipairs(jids) do Q.delete_job(jid) end
      Q.chunked('ZREM', 'ql:completed', jids)
    end
  end

  -- ---------------------------------------------------------------- complete

  -- The job hash fields complete needs, in one constructor (sized once, where setting them
  -- one by one into `{}` grows the table again and again). `priority` only for `next`; the
  -- fields that only tell whether the hash holds a long value are read by Q.long_values.
  local function read_own(jid, nextq)
    local v = rcall('HMGET', 'ql:j:' .. jid, 'state', 'queue', 'worker', 'retries', 'time',
      'held', 'history', 'tracked', 'done', nextq and 'priority' or 'state')
    local any = false
    for i = 1, 9 do
      if v[i] then any = true; break end
    end
    if not any then return nil end
    return { state = v[1] or nil, queue = v[2] or nil, worker = v[3] or nil,
      retries = v[4] or nil, time = v[5] or nil, held = v[6] or nil, history = v[7] or nil,
      tracked = v[8] or nil, done = v[9] or nil, priority = nextq and v[10] or nil }
  end

  -- True when the job hash already holds a value longer than Q.SMALL_VALUE among the fields
  -- complete did not read (a completion that would lengthen `history` past it asks this).
  function Q.long_values(jid)
    return Q.roomy(unpack(rcall('HMGET', 'ql:j:' .. jid, 'klass', 'tags', 'failure', 'throttles')))
  end

  -- Ownership checks shared by complete and complete.reserve. With an attempt token that
  -- already completed this job, returns (h, recorded result) and the caller acts no further.
  function Q.check_running(jid, worker, queue, token, nextq)
    local h = read_own(jid, nextq)
    if not h then Q.fail('Job ' .. jid .. ' does not exist') end
    local recorded = Q.recorded(h, token)
    if recorded then return h, recorded end
    if h.state ~= 'running' then
      Q.fail('Job ' .. jid .. ' is not currently running: ' .. tostring(h.state))
    end
    if h.worker ~= worker then
      Q.fail('Job ' .. jid .. ' has been handed out to another worker: ' .. tostring(h.worker))
    end
    if h.queue ~= queue then
      Q.fail('Job ' .. jid .. ' running in another queue: ' .. tostring(h.queue))
    end
    return h
  end

  -- Release every dependent of a completed job whose last dependency this was.
  local function release_dependents(jid, now)
    local dents = rcall('SMEMBERS', Q.kdents(jid))
    for _, d in ipairs(dents) do
      rcall('SREM', Q.kdeps(d), jid)
      if rcall('SCARD', Q.kdeps(d)) == 0 then
        local h = Q.read(d, { 'state', 'queue', 'priority', 'scheduled' })
        if h and h.state == 'depends' and h.queue and h.queue ~= '' then Q.undepend(d, h, now) end
      end
    end
    if #dents > 0 then rcall('DEL', Q.kdents(jid)) end
  end

  -- Complete a running job whose ownership was checked (h from Q.check_running).
  function Q.complete(now, jid, worker, queue, data, h, nextq, delay, depends, token)
    local key = Q.kjob(jid)
    local compact = not nextq and h.history
      and Q.compact_done(h.history, now, worker, jid, h, data)
    if not compact then
      Q.history_text(jid, '[' .. Q.floor_text(now) .. ',"done"]', h.history, true)
    end
    rcall('ZREM', Q.qn(queue).locks, jid)
    Q.sample('run', queue, now, now - (tonumber(h.time) or now))
    rcall('ZREM', Q.kwjobs(worker), jid)
    if h.tracked == '1' then Q.publish('ql:completed', jid) end
    local retries = Q.int_arg(tonumber(h.retries) or 5)
    local fields = { 'data', data, 'worker', '', 'failure', '{}', 'expires', '0',
      'remaining', retries, 'time', Q.ftime(now) }
    if compact or (h.history and h.history ~= '[]') then
      -- the compact field, or `[]` for a field just migrated (this HSET replaces an HDEL)
      table.insert(fields, 'history'); table.insert(fields, compact or '[]')
    end
    if h.held then table.insert(fields, 'held'); table.insert(fields, '') end
    if nextq then
      Q.publish('ql:log', '{"jid":' .. Q.js(jid) .. ',"to":' .. Q.js(nextq)
        .. ',"event":"advanced","queue":' .. Q.js(queue) .. '}')
      Q.history(jid, now, 'put', { q = nextq })
      rcall('ZADD', 'ql:queues', 'NX', now, nextq)
      table.insert(fields, 'queue'); table.insert(fields, nextq)
      local result
      local ndeps = 0
      if depends and #depends > 0 then ndeps = Q.add_deps(jid, depends) end
      if delay > 0 and ndeps == 0 and not (depends and #depends > 0) then
        rcall('ZADD', Q.kq(nextq, 'scheduled'), now + delay, jid)
        Q.lower_due(nextq, now + delay)
        result = 'scheduled'
      elseif ndeps > 0 then
        rcall('ZADD', Q.kq(nextq, 'depends'), now, jid)
        if delay > 0 then table.insert(fields, 'scheduled'); table.insert(fields, now + delay) end
        result = 'depends'
      else
        rcall('ZADD', Q.kq(nextq, 'work'), Q.score(tonumber(h.priority) or 0, now), jid)
        Q.wake(nextq)
        result = 'waiting'
      end
      table.insert(fields, 'state'); table.insert(fields, result)
      if token then table.insert(fields, 'done'); table.insert(fields, token .. ' ' .. result) end
      rcall('HSET', key, unpack(fields))
      Q.release(jid, h.held, now)
      Q.slot_freed(queue)
      return result
    end
    Q.publish('ql:log', '{"jid":' .. Q.js(jid) .. ',"event":"completed","queue":' .. Q.js(queue) .. '}')
    table.insert(fields, 'state'); table.insert(fields, 'complete')
    table.insert(fields, 'queue'); table.insert(fields, '')
    if token then table.insert(fields, 'done'); table.insert(fields, token .. ' complete') end
    rcall('HSET', key, unpack(fields))
    rcall('ZADD', 'ql:completed', Q.time_arg(now), jid)
    Q.release(jid, h.held, now)
    Q.slot_freed(queue)
    release_dependents(jid, now)
    Q.expire_completed(now)
    return 'complete'
  end

  C['complete'] = { 'Complete', function(now, args)
    local jid = Q.jid(args[1])
    local worker = Q.worker(args[2])
    local queue = Q.queue(args[3])
    local data = Q.data(args[4])
    local opts = Q.pairs_args(args, 5)
    local nextq = opts['next'] and Q.queue(opts['next'], 'next') or nil
    local delay = 0
    if opts.delay then delay = Q.delay(opts.delay) end
    local depends = opts.depends and Q.depends(opts.depends, jid) or nil
    if opts.delay and not nextq then Q.fail('"delay" cannot be used without a "next".') end
    if opts.depends and not nextq then Q.fail('"depends" cannot be used without a "next".') end
    local token = Q.token(opts.token)
    local h, recorded = Q.check_running(jid, worker, queue, token, nextq)
    if recorded then return recorded end
    if depends then Q.check_cycle(jid, depends) end
    Q.load_config({ 'jobs-history', 'jobs-history-count', 'max-job-history', '#completed-due',
      queue .. '-max-concurrency' })
    return Q.complete(now, jid, worker, queue, data, h, nextq, delay, depends, token)
  end }

  -- ---------------------------------------------------------------- fail / retry

  local FAIL_FIELDS = { 'state', 'queue', 'worker', 'priority', 'remaining', 'held', 'grace', 'history',
    'tracked', 'done' }

  C['fail'] = { 'Fail', function(now, args)
    local jid = Q.jid(args[1])
    local worker = Q.worker(args[2])
    local group = Q.group(args[3])
    local message = Q.message(args[4], true)
    local data = args[5] and Q.data(args[5]) or nil
    local token = Q.token(args[6])
    local h = Q.read(jid, FAIL_FIELDS)
    if not h then Q.fail('Job ' .. jid .. ' does not exist') end
    local recorded = Q.recorded(h, token)
    if recorded then return recorded end
    if h.state ~= 'running' then Q.fail('Job ' .. jid .. ' not currently running: ' .. tostring(h.state)) end
    if h.worker ~= worker then Q.fail('Job ' .. jid .. ' running with another worker: ' .. tostring(h.worker)) end
    local queue = h.queue
    Q.publish('ql:log', Q.ev_failed(jid, worker, group, message))
    if h.tracked == '1' then Q.publish('ql:failed', jid) end
    rcall('ZREM', Q.kwjobs(worker), jid)
    Q.history(jid, now, 'failed', { worker = worker, group = group }, h.history)
    Q.counter(queue, now, 'failures', 1)
    Q.counter(queue, now, 'failed', 1)
    rcall('ZREM', Q.kq(queue, 'locks'), jid)
    local fields = { 'state', 'failed', 'worker', '', 'expires', '',
      'failure', cjson.encode({ group = group, message = message, when = floor(now), worker = worker }) }
    if data then table.insert(fields, 'data'); table.insert(fields, data) end
    if h.held then table.insert(fields, 'held'); table.insert(fields, '') end
    if token then table.insert(fields, 'done'); table.insert(fields, token .. ' ' .. jid) end
    rcall('HSET', Q.kjob(jid), unpack(fields))
    if h.grace then rcall('HDEL', Q.kjob(jid), 'grace') end
    rcall('SADD', 'ql:failures', group)
    rcall('LPUSH', 'ql:f:' .. group, jid)
    Q.release(jid, h.held, now)
    Q.slot_freed(queue)
    return jid
  end }

  -- Refuse unless job `jid` (hash fields h) is running for `worker` (retry's wording).
  local function check_held(h, jid, worker)
    if h.state ~= 'running' then
      Q.fail('Job ' .. jid .. ' is not currently running: ' .. tostring(h.state))
    end
    if h.worker ~= worker then
      Q.fail('Job ' .. jid .. ' has been given to another worker: ' .. tostring(h.worker))
    end
  end

  C['retry'] = { 'Retry', function(now, args)
    local jid = Q.jid(args[1])
    local queue = Q.queue(args[2])
    local worker = Q.worker(args[3])
    local delay = 0
    if args[4] ~= nil and args[4] ~= '' then delay = Q.delay(args[4]) end
    local group = args[5]
    if group == '' then group = nil end
    if group then Q.group(group) end
    local message = args[6]
    if message == '' then message = nil end
    if message then message = Q.message(message) end
    local token = Q.token(args[7])
    local h = Q.read(jid, FAIL_FIELDS)
    if not h then Q.fail('Job ' .. jid .. ' does not exist') end
    local recorded = Q.recorded(h, token)
    if recorded then return tonumber(recorded) end
    check_held(h, jid, worker)
    if h.queue ~= queue then Q.fail('Job ' .. jid .. ' running in another queue: ' .. tostring(h.queue)) end
    local remaining = (tonumber(h.remaining) or 0) - 1
    -- No history entry unless retries are exhausted: a compact `history` field stays as it is.
    rcall('ZREM', Q.kq(queue, 'locks'), jid)
    rcall('ZREM', Q.kwjobs(worker), jid)
    if h.grace then rcall('HDEL', Q.kjob(jid), 'grace') end
    local fields = { 'remaining', remaining }
    if h.held then table.insert(fields, 'held'); table.insert(fields, '') end
    if token then table.insert(fields, 'done'); table.insert(fields, token .. ' ' .. floor(remaining)) end
    if remaining < 0 then
      local g, m, w = group, message, worker
      if not (group and message) then
        g = group or ('failed-retries-' .. queue)
        m = 'Job exhausted retries in queue "' .. queue .. '"'
        w = ''
      end
      Q.exhausted(jid, queue, now, g, m, w, fields, h.history)
      if h.tracked == '1' then Q.publish('ql:failed', jid) end
    else
      if delay > 0 then
        rcall('ZADD', Q.kq(queue, 'scheduled'), now + delay, jid)
        Q.lower_due(queue, now + delay)
        table.insert(fields, 'state'); table.insert(fields, 'scheduled')
      else
        rcall('ZADD', Q.kq(queue, 'work'), Q.score(tonumber(h.priority) or 0, now), jid)
        table.insert(fields, 'state'); table.insert(fields, 'waiting')
        Q.wake(queue)
      end
      table.insert(fields, 'worker'); table.insert(fields, '')
      table.insert(fields, 'expires'); table.insert(fields, 0)
      if group and message then
        table.insert(fields, 'failure')
        table.insert(fields, cjson.encode({ group = group, message = message, when = floor(now), worker = worker }))
      end
      rcall('HSET', Q.kjob(jid), unpack(fields))
    end
    Q.release(jid, h.held, now)
    return floor(remaining)
  end }

  -- Extension: a worker gives back a job it holds (stopping on TERM), spending no retry.
  -- The job goes to the front of its priority in its queue: waiting, throttle slots freed.
  C['release'] = { 'Release', function(now, args)
    local jid = Q.jid(args[1])
    local worker = Q.worker(args[2])
    local h = Q.read(jid, FAIL_FIELDS)
    if not h then Q.fail('Job ' .. jid .. ' does not exist') end
    check_held(h, jid, worker)
    local queue = h.queue
    rcall('ZREM', Q.kq(queue, 'locks'), jid)
    rcall('ZREM', Q.kwjobs(worker), jid)
    rcall('ZADD', Q.kq(queue, 'work'), Q.score(tonumber(h.priority) or 0, now), jid)
    Q.history(jid, now, 'put', { q = queue }, h.history)
    local fields = { 'state', 'waiting', 'worker', '', 'expires', 0 }
    if h.held then table.insert(fields, 'held'); table.insert(fields, '') end
    rcall('HSET', Q.kjob(jid), unpack(fields))
    if h.grace then rcall('HDEL', Q.kjob(jid), 'grace') end
    if h.tracked == '1' then Q.publish('ql:put', jid) end
    Q.publish('ql:log', Q.ev_put(jid, queue))
    Q.release(jid, h.held, now)
    Q.slot_freed(queue)
    Q.wake(queue)
    return 'waiting'
  end }

  -- ---------------------------------------------------------------- heartbeat / timeout

  C['heartbeat'] = { 'Heartbeat', function(now, args)
    local jid = Q.jid(args[1])
    local worker = Q.worker(args[2], 'Heatbeat')
    local data = args[3] and Q.data(args[3]) or nil
    local h = Q.read(jid, { 'state', 'queue', 'worker', 'grace' })
    if not h then Q.fail('Job ' .. jid .. ' does not exist') end
    if h.state ~= 'running' then Q.fail('Job ' .. jid .. ' not currently running: ' .. tostring(h.state)) end
    if h.worker ~= worker then
      Q.fail('Job ' .. jid .. ' given out to another worker: ' .. tostring(h.worker))
    end
    Q.load_config({ 'heartbeat', h.queue .. '-heartbeat' })
    local expires = now + Q.heartbeat(h.queue)
    if data then
      rcall('HSET', Q.kjob(jid), 'expires', expires, 'data', data)
    else
      rcall('HSET', Q.kjob(jid), 'expires', expires)
    end
    if h.grace then rcall('HDEL', Q.kjob(jid), 'grace') end
    rcall('ZADD', Q.kwjobs(worker), expires, jid)
    rcall('ZADD', 'ql:workers', now, worker)
    rcall('ZADD', Q.kq(h.queue, 'locks'), expires, jid)
    Q.lower_due(h.queue, expires)
    return expires
  end }

  C['timeout'] = { 'Timeout', function(now, args)
    local jids = Q.jid_args(args, 1)
    local jobs = {}
    for i, jid in ipairs(jids) do
      local h = Q.read(jid, { 'state', 'queue', 'worker', 'grace', 'held', 'history' })
      if not h then Q.fail('Job ' .. jid .. ' does not exist') end
      if h.state ~= 'running' then Q.fail('Job ' .. jid .. ' not running') end
      jobs[i] = h
    end
    for i, jid in ipairs(jids) do
      local h = jobs[i]
      if h.state == 'running' then -- a jid listed twice is handled once
        h.state = 'stalled'
        Q.history(jid, now, 'timed-out', nil, h.history)
        rcall('ZREM', Q.kq(h.queue, 'locks'), jid)
        rcall('ZADD', Q.kq(h.queue, 'work'), '+inf', jid)
        rcall('HSET', Q.kjob(jid), 'state', 'stalled', 'expires', 0, 'worker', '')
        if h.grace or h.held then rcall('HDEL', Q.kjob(jid), 'grace', 'held') end
        if h.worker and h.worker ~= '' then
          rcall('ZREM', Q.kwjobs(h.worker), jid)
          Q.lock_lost(jid, h.worker)
        end
        Q.release(jid, h.held, now)
        Q.wake(h.queue)
      end
    end
  end }

  -- ---------------------------------------------------------------- cancel

  C['cancel'] = { 'Cancel', function(now, args)
    local jids = Q.jid_args(args, 1)
    local given = {}
    for _, jid in ipairs(jids) do given[jid] = true end
    for _, jid in ipairs(jids) do
      for _, d in ipairs(rcall('SMEMBERS', Q.kdents(jid))) do
        if not given[d] then
          Q.fail(jid .. ' is a dependency of ' .. d .. ' but is not mentioned to be canceled')
        end
      end
    end
    local done = {}
    for _, jid in ipairs(jids) do
      local h = Q.read(jid, { 'state', 'queue', 'worker', 'tags', 'failure', 'throttles', 'held' })
      if not done[jid] and not (h and h.state == 'complete') then
        done[jid] = true
        h = h or {}
        local payload = '{"jid":' .. Q.js(jid) .. ',"queue":' .. Q.js(h.queue or false)
          .. ',"event":"canceled","worker":' .. Q.js(h.worker or false) .. '}'
        Q.publish('ql:log', payload)
        if h.worker and h.worker ~= '' then
          rcall('ZREM', Q.kwjobs(h.worker), jid)
          Q.publish('ql:w:' .. h.worker, payload)
        end
        if h.state then
          Q.unqueue(jid, h.queue, h.state, h.throttles)
          for _, d in ipairs(rcall('SMEMBERS', Q.kdeps(jid))) do rcall('SREM', Q.kdents(d), jid) end
          if h.state == 'failed' then Q.unfailed(jid, h.failure, h.queue) end
          for _, tag in ipairs(Q.list(h.tags)) do Q.tag_remove(jid, tag) end
          Q.release(jid, h.held, now)
        end
        if rcall('ZREM', 'ql:tracked', jid) == 1 then Q.publish('ql:canceled', jid) end
        rcall('DEL', Q.kjob(jid), Q.khist(jid), Q.kdeps(jid), Q.kdents(jid))
      end
    end
    return jids
  end }
end

Q.mod.jobmeta = function()
  local rcall = Q.rcall
  local floor = math.floor
  local C = Q.commands


  -- ---------------------------------------------------------------- job metadata
  -- Commands: depends jid on|off jid...|all -> 1; priority jid p -> p; log jid message [data];
  -- get jid -> JSON|nil; multiget jid... -> JSON array; tag add|remove|get|top ...;
  -- track [track|untrack jid] -> JSON.

  C['depends'] = { 'Depends', function(now, args)
    local jid = Q.jid(args[1])
    local command = args[2]
    local targets
    if command == 'on' then
      targets = Q.jid_args(args, 3)
      for _, d in ipairs(targets) do
        if d == jid then Q.fail('Arg "depends" invalid: a job cannot depend on itself') end
      end
    elseif command == 'off' then
      if args[3] ~= 'all' then targets = Q.jid_args(args, 3) end
    else
      Q.fail('Argument "command" must be "on" or "off"')
    end
    local h = Q.read(jid, { 'state', 'queue', 'priority', 'scheduled' })
    if not h or h.state ~= 'depends' then
      Q.fail('Job ' .. jid .. ' not in the depends state: ' .. tostring(h and h.state or false))
    end
    if command == 'on' then
      Q.check_cycle(jid, targets)
      Q.add_deps(jid, targets)
      return 1
    end
    if not targets then targets = rcall('SMEMBERS', Q.kdeps(jid)) end
    for _, d in ipairs(targets) do
      rcall('SREM', Q.kdents(d), jid)
      rcall('SREM', Q.kdeps(jid), d)
    end
    if rcall('SCARD', Q.kdeps(jid)) == 0 and h.queue and h.queue ~= '' then
      rcall('DEL', Q.kdeps(jid))
      Q.undepend(jid, h, now)
    end
    return 1
  end }

  C['priority'] = { 'Priority', function(now, args)
    local jid = Q.jid(args[1])
    local priority = Q.priority(args[2], 'missing or not a number')
    local h = Q.read(jid, { 'queue', 'state' })
    if not h then Q.fail('Job ' .. jid .. ' does not exist') end
    -- A timed-out (stalled) job keeps its +inf score: it stays first in line.
    if h.queue and h.queue ~= '' and h.state ~= 'stalled' then
      local key = Q.kq(h.queue, 'work')
      if rcall('ZSCORE', key, jid) then rcall('ZADD', key, priority, jid) end
    end
    rcall('HSET', Q.kjob(jid), 'priority', priority)
    return priority
  end }

  C['log'] = { 'Log', function(now, args)
    local jid = Q.jid(args[1])
    local message = args[2]
    if message == nil or message == '' then Q.fail('Arg "message" missing') end
    message = Q.message(message)
    local extra
    if args[3] then
      Q.data(args[3])
      extra = cjson.decode(args[3])
      if next(extra) == nil then extra = nil end
    end
    local h = Q.read(jid, { 'state', 'history' })
    if not h then Q.fail('Job ' .. jid .. ' does not exist') end
    Q.history(jid, now, message, extra, h.history)
  end }

  C['get'] = { 'Get', function(now, args)
    local job = Q.get(Q.jid(args[1]))
    if job then return cjson.encode(job) end
    return nil
  end }

  C['multiget'] = { 'MultiGet', function(now, args)
    local out = {}
    for _, jid in ipairs(Q.jid_args(args, 1, true)) do
      local job = Q.get(jid)
      if job then table.insert(out, job) end
    end
    return cjson.encode(out)
  end }

  C['tag'] = { 'Tag', function(now, args)
    local command = args[1]
    if command == 'add' or command == 'remove' then
      local jid = Q.jid(args[2])
      local given = {}
      for i = 3, #args do table.insert(given, Q.tag_name(args[i])) end
      if #given > Q.MAX_LIST then Q.fail('at most ' .. Q.MAX_LIST .. ' tags') end
      local h = Q.read(jid, { 'tags' })
      if not h then Q.fail('Job ' .. jid .. ' does not exist') end
      local tags, have = Q.list(h.tags), {}
      for _, t in ipairs(tags) do have[t] = true end
      if command == 'add' then
        for _, t in ipairs(given) do
          if not have[t] then
            if #tags >= 50 then Q.fail('Arg "tags" has more than 50 entries') end
            have[t] = 'new'
            table.insert(tags, t)
          end
        end
        for _, t in ipairs(tags) do
          if have[t] == 'new' then Q.tag_add(jid, t, now) end
        end
      else
        local drop = {}
        for _, t in ipairs(given) do drop[t] = true end
        local kept = {}
        for _, t in ipairs(tags) do
          if drop[t] then Q.tag_remove(jid, t) else table.insert(kept, t) end
        end
        tags = kept
      end
      rcall('HSET', Q.kjob(jid), 'tags', cjson.encode(tags))
      return cjson.encode(tags)
    elseif command == 'get' then
      local tag = Q.tag_name(args[2])
      local offset = Q.offset('offset', args[3])
      local count = Q.count(args[4], 0, 500, 25)
      local jobs = {}
      if count > 0 then jobs = rcall('ZRANGE', 'ql:t:' .. tag, offset, offset + count - 1) end
      return cjson.encode({ total = rcall('ZCARD', 'ql:t:' .. tag), jobs = jobs })
    elseif command == 'top' then
      local offset = Q.offset('offset', args[2])
      local count = Q.count(args[3], 0, 500, 25)
      if count == 0 then return cjson.encode({}) end
      return cjson.encode(rcall('ZREVRANGEBYSCORE', 'ql:tags', '+inf', 2, 'LIMIT', offset, count))
    end
    Q.fail('First argument must be "add", "remove" or "get"')
  end }

  C['track'] = { 'Track', function(now, args)
    if #args == 0 then
      local jobs, expired = {}, {}
      for _, jid in ipairs(rcall('ZRANGE', 'ql:tracked', 0, -1)) do
        local h = Q.read(jid, Q.ALL)
        if h then
          table.insert(jobs, Q.job_object(jid, h, true, false))
        else
          table.insert(expired, jid)
        end
      end
      return cjson.encode({ jobs = jobs, expired = expired })
    end
    local action = string.lower(args[1])
    if action ~= 'track' and action ~= 'untrack' then
      Q.fail('Unknown action "' .. args[1] .. '"')
    end
    if args[2] == nil or args[2] == '' then Q.fail('Arg "jid" missing') end
    local jid = Q.jid(args[2])
    if rcall('EXISTS', Q.kjob(jid)) == 0 then Q.fail('Job does not exist') end
    if action == 'track' then
      Q.publish('ql:track', jid)
      rcall('HSET', Q.kjob(jid), 'tracked', 1)
      return cjson.encode(rcall('ZADD', 'ql:tracked', now, jid))
    end
    Q.publish('ql:untrack', jid)
    rcall('HDEL', Q.kjob(jid), 'tracked')
    return cjson.encode(rcall('ZREM', 'ql:tracked', jid))
  end }
end
