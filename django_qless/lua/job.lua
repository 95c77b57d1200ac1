-- job.lua: commands acting on one job (or a list of jobs).
--
--@ command fail throttle
--@ command retry throttle
--@ command release throttle
--@ command heartbeat
--@ command timeout throttle
--@ command cancel throttle
--
-- Commands (after `now`); complete is in complete.lua, depends/priority/log/get/multiget/
-- tag/track in jobmeta.lua, put/requeue/put.many in put.lua:
--   fail      jid worker group message [data [token]]               -> jid
--   retry     jid queue worker [delay] [group] [message] [token] [priority] -> remaining (integer)
--             (extension: `priority`, '' for none, is the priority the job waits with again)
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
--   ql:w:<worker>:info         hash  (HINCRBY failed in fail; workerinfo.lua)
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
    local key = KP .. 'f:' .. group
    rcall('LREM', key, 0, jid)
    if rcall('LLEN', key) == 0 then rcall('SREM', K.failures, group) end
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
    rcall('ZREM', K.tracked, jid)
  end

  -- ---------------------------------------------------------------- fail / retry

  local FAIL_FIELDS = { 'state', 'queue', 'worker', 'priority', 'remaining', 'held', 'grace', 'history',
    'tracked', 'done', 'retries' }

  C['fail'] = { 'Fail', function(now, args)
    local jid = Q.jid(args[1])
    local worker = Q.worker(args[2])
    local group = Q.group(args[3])
    local message = Q.message(args[4], true)
    -- Extension: empty data keeps the stored data (a client needs a placeholder before the
    -- token; stock clients never send '', which qless-core refuses as not JSON).
    local data = args[5] ~= nil and args[5] ~= '' and Q.data(args[5]) or nil
    local token = Q.token(args[6])
    local h = Q.read(jid, FAIL_FIELDS)
    if not h then Q.fail('Job ' .. jid .. ' does not exist') end
    local recorded = Q.recorded(h, token)
    if recorded then return recorded end
    if h.state ~= 'running' then Q.fail('Job ' .. jid .. ' not currently running: ' .. tostring(h.state)) end
    if h.worker ~= worker then Q.fail('Job ' .. jid .. ' running with another worker: ' .. tostring(h.worker)) end
    local queue = h.queue
    Q.publish(K.log, Q.ev_failed(jid, worker, group, message))
    if h.tracked == '1' then Q.publish(K.failed, jid) end
    rcall('ZREM', Q.kwjobs(worker), jid)
    rcall('HINCRBY', KP .. 'w:' .. worker .. ':info', 'failed', 1) -- the dashboard's count (workerinfo.lua)
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
    rcall('SADD', K.failures, group)
    rcall('LPUSH', KP .. 'f:' .. group, jid)
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

  -- The longest retry reason a history entry keeps (the failure itself keeps it whole).
  local RETRY_REASON_BYTES = 300

  -- `text` cut to at most `n` bytes, never inside a UTF-8 sequence.
  local function clip(text, n)
    if #text <= n then return text end
    local cut = n
    while cut > 0 and text:byte(cut + 1) >= 0x80 and text:byte(cut + 1) < 0xC0 do cut = cut - 1 end
    return text:sub(1, cut) .. '...'
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
    local priority = nil
    if args[8] ~= nil and args[8] ~= '' then priority = Q.priority(args[8]) end
    local h = Q.read(jid, FAIL_FIELDS)
    if not h then Q.fail('Job ' .. jid .. ' does not exist') end
    local recorded = Q.recorded(h, token)
    if recorded then return tonumber(recorded) end
    check_held(h, jid, worker)
    if h.queue ~= queue then Q.fail('Job ' .. jid .. ' running in another queue: ' .. tostring(h.queue)) end
    if priority then
      h.priority = priority
    end
    -- (a lean record has no `remaining` while it equals `retries`)
    local remaining = (tonumber(h.remaining) or tonumber(h.retries) or 0) - 1
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
      if h.tracked == '1' then Q.publish(K.failed, jid) end
    else
      -- A `retry` history entry says why the job runs again (exhausted retries write their
      -- `failed` entry instead). Written before the HSET below: it reads the `visit` field.
      local extra = { worker = worker, remaining = floor(remaining) }
      if group then extra.group = group end
      if message then extra.message = clip(message, RETRY_REASON_BYTES) end
      if delay > 0 then extra.delay = delay end
      Q.history(jid, now, 'retry', extra, h.history)
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
      if priority then table.insert(fields, 'priority'); table.insert(fields, priority) end
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
    if h.tracked == '1' then Q.publish(K.put, jid) end
    Q.publish(K.log, Q.ev_put(jid, queue))
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
    local expires = Q.lease_end(now, Q.heartbeat(h.queue))
    if data then
      rcall('HSET', Q.kjob(jid), 'expires', expires, 'data', data)
    else
      rcall('HSET', Q.kjob(jid), 'expires', expires)
    end
    if h.grace then rcall('HDEL', Q.kjob(jid), 'grace') end
    rcall('ZADD', Q.kwjobs(worker), expires, jid)
    rcall('ZADD', K.workers, now, worker)
    rcall('ZADD', Q.kq(h.queue, 'locks'), expires, jid)
    Q.lower_due(h.queue, expires, false)
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
          -- (a new waiting job's hash has no `worker` field: it reads as '')
          .. ',"event":"canceled","worker":' .. Q.js(h.worker or (h.state and '' or false)) .. '}'
        Q.publish(K.log, payload)
        if h.worker and h.worker ~= '' then
          rcall('ZREM', Q.kwjobs(h.worker), jid)
          Q.publish(KP .. 'w:' .. h.worker, payload)
        end
        if h.state then
          Q.unqueue(jid, h.queue, h.state, h.throttles)
          for _, d in ipairs(rcall('SMEMBERS', Q.kdeps(jid))) do rcall('SREM', Q.kdents(d), jid) end
          if h.state == 'failed' then Q.unfailed(jid, h.failure, h.queue) end
          for _, tag in ipairs(Q.list(h.tags)) do Q.tag_remove(jid, tag) end
          Q.release(jid, h.held, now)
        end
        if rcall('ZREM', K.tracked, jid) == 1 then Q.publish(K.canceled, jid) end
        rcall('DEL', Q.kjob(jid), Q.khist(jid), Q.kdeps(jid), Q.kdents(jid))
      end
    end
    return jids
  end }
end
