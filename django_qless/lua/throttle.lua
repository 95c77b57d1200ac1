-- throttle.lua: throttles (reqless command names) and the acquire/release used by jobs.
--
-- Commands (after `now`):
--   throttle.set tid max [ttl]      -> nil
--   throttle.get tid                -> JSON {"id","maximum","ttl"}
--   throttle.delete tid             -> nil
--   throttle.locks tid              -> array of jids holding it
--   throttle.pending tid            -> array of jids waiting for it
--   throttle.release tid jid...     -> nil (drops the jids from locks and pending only)
--   queue.throttle.set queue max    -> nil (throttle id ql:q:<queue>)
--   queue.throttle.get queue        -> JSON as throttle.get
--
-- Keys:
--   ql:th:<tid>              hash  {id, maximum}; optional TTL
--   ql:th:<tid>-locks        zset  jids holding the throttle -> time acquired
--   ql:th:<tid>-pending      zset  jids waiting for it -> time pended
--   ql:q:<queue>-throttled   zset  throttled jids of a queue -> time throttled
--   ql:q:<queue>-work        zset  (released jobs go back here)
--   ql:config                hash  hidden field #throttle:<queue> (HSET/HDEL/HMGET)
--   ql:j:<jid>               hash  fields throttles (JSON list), held (JSON list of tids
--                                  acquired at pop), state, queue, priority


Q.mod.throttle = function()
  local th_rcall = Q.rcall


  function Q.kth(tid) return 'ql:th:' .. tid end

  -- The throttle ids that apply to a job popped from `queue`: its own list plus the queue
  -- throttle when one is configured (checked once per call per queue).
  function Q.job_tids(queue, throttles_text)
    Q.qth = Q.qth or {}
    local has = Q.qth[queue]
    if has == nil then
      has = Q.cfgraw(Q.mfield('throttle', queue)) == '1'
      Q.qth[queue] = has
    end
    local list = Q.list(throttles_text)
    if has then
      local out = { 'ql:q:' .. queue }
      for _, t in ipairs(list) do
        if t ~= out[1] then table.insert(out, t) end
      end
      return out
    end
    return list
  end

  local function maximum(tid)
    return tonumber(th_rcall('HGET', Q.kth(tid), 'maximum')) or 0
  end

  -- Try to take every throttle in `tids`; returns nil on success, else the first full tid.
  function Q.acquire(jid, tids, now)
    for _, tid in ipairs(tids) do
      local max = maximum(tid)
      if max > 0 then
        local key = Q.kth(tid) .. '-locks'
        if th_rcall('ZSCORE', key, jid) == false and th_rcall('ZCARD', key) >= max then
          return tid
        end
      end
    end
    for _, tid in ipairs(tids) do th_rcall('ZADD', Q.kth(tid) .. '-locks', now, jid) end
    return nil
  end

  -- Move a job that could not get `tid` into its queue's throttled set.
  function Q.throttle_job(jid, queue, tid, now)
    th_rcall('ZADD', Q.kq(queue, 'throttled'), now, jid)
    th_rcall('ZADD', Q.kth(tid) .. '-pending', now, jid)
    th_rcall('HSET', Q.kjob(jid), 'state', 'throttled')
  end

  -- Let up to (maximum - held) pending jobs of a throttle (10 if unlimited) back into work.
  local function admit(tid, now)  -- also Q.admit, for the commands
    local pkey = Q.kth(tid) .. '-pending'
    local max = maximum(tid)
    local room = 10
    if max > 0 then room = max - th_rcall('ZCARD', Q.kth(tid) .. '-locks') end
    if room <= 0 then return end
    local jids = th_rcall('ZRANGE', pkey, 0, room - 1)
    if #jids == 0 then return end
    Q.chunked('ZREM', pkey, jids)
    for _, jid in ipairs(jids) do
      local h = Q.read(jid, { 'state', 'queue', 'priority' })
      if h and h.state == 'throttled' and h.queue and h.queue ~= '' then
        th_rcall('ZREM', Q.kq(h.queue, 'throttled'), jid)
        th_rcall('ZADD', Q.kq(h.queue, 'work'), Q.score(tonumber(h.priority) or 0, now), jid)
        th_rcall('HSET', Q.kjob(jid), 'state', 'waiting')
        Q.wake(h.queue)
      end
    end
  end

  Q.admit = admit

  -- Release the throttles a job holds (the JSON list in its `held` field).
  function Q.release(jid, held_text, now)
    if not held_text or held_text == '' then return end
    for _, tid in ipairs(Q.list(held_text)) do
      th_rcall('ZREM', Q.kth(tid) .. '-locks', jid)
      admit(tid, now)
    end
  end

  -- Drop a throttled job from every pending set it may sit in.
  function Q.unpend(jid, queue, throttles_text)
    for _, tid in ipairs(Q.job_tids(queue, throttles_text)) do
      th_rcall('ZREM', Q.kth(tid) .. '-pending', jid)
    end
    th_rcall('ZREM', Q.kq(queue, 'throttled'), jid)
  end
end

Q.mod.throttle_cmds = function()
  local th_rcall = Q.rcall


  local function throttle_info(tid)
    local max = th_rcall('HGET', Q.kth(tid), 'maximum')
    return cjson.encode({ id = tid, maximum = tonumber(max) or 0, ttl = th_rcall('TTL', Q.kth(tid)) })
  end

  -- The queue a throttle id `ql:q:<queue>` belongs to, if it is one.
  local function throttle_queue(tid)
    local queue = tid:match('^ql:q:(.+)$')
    if queue and #queue <= 64 and queue:match('^[%w_%.%-]+$') then return queue end
    return nil
  end

  local function throttle_set(tid, max, ttl)
    th_rcall('HSET', Q.kth(tid), 'id', tid, 'maximum', max)
    if ttl and ttl > 0 then th_rcall('EXPIRE', Q.kth(tid), ttl) else th_rcall('PERSIST', Q.kth(tid)) end
    local queue = throttle_queue(tid)
    if queue then th_rcall('HSET', 'ql:config', Q.mfield('throttle', queue), 1) end
  end

  Q.commands = Q.commands or {}
  local C = Q.commands

  C['throttle.set'] = { 'Throttle', function(now, args)
    local tid = Q.throttle_id(args[1], 'tid')
    local max = Q.integer('maximum', args[2], 0, nil)
    local ttl = Q.opt_integer('ttl', args[3], 0, 0, nil)
    throttle_set(tid, max, ttl)
    Q.admit(tid, now)
  end }

  C['throttle.get'] = { 'Throttle', function(now, args)
    return throttle_info(Q.throttle_id(args[1], 'tid'))
  end }

  C['throttle.delete'] = { 'Throttle', function(now, args)
    local tid = Q.throttle_id(args[1], 'tid')
    th_rcall('DEL', Q.kth(tid))
    local queue = throttle_queue(tid)
    if queue then th_rcall('HSET', 'ql:config', Q.mfield('throttle', queue), 0) end
  end }

  C['throttle.locks'] = { 'Throttle', function(now, args)
    return th_rcall('ZRANGE', Q.kth(Q.throttle_id(args[1], 'tid')) .. '-locks', 0, -1)
  end }

  C['throttle.pending'] = { 'Throttle', function(now, args)
    return th_rcall('ZRANGE', Q.kth(Q.throttle_id(args[1], 'tid')) .. '-pending', 0, -1)
  end }

  C['throttle.release'] = { 'Throttle', function(now, args)
    local tid = Q.throttle_id(args[1], 'tid')
    local jids = Q.jid_args(args, 2)
    Q.chunked('ZREM', Q.kth(tid) .. '-locks', jids)
    Q.chunked('ZREM', Q.kth(tid) .. '-pending', jids)
  end }

  C['queue.throttle.set'] = { 'Throttle', function(now, args)
    local queue = Q.queue(args[1])
    local max = Q.integer('maximum', args[2], 0, nil)
    throttle_set('ql:q:' .. queue, max, 0)
    Q.admit('ql:q:' .. queue, now)
  end }

  C['queue.throttle.get'] = { 'Throttle', function(now, args)
    return throttle_info('ql:q:' .. Q.queue(args[1]))
  end }
end
