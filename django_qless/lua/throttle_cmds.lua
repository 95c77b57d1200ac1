-- throttle_cmds.lua: the throttle commands (reqless names); acquire/release is in throttle.lua.
--
--@ needs throttle lists
--@ command throttle.set
--@ command throttle.get
--@ command throttle.delete
--@ command throttle.locks
--@ command throttle.pending
--@ command throttle.release
--@ command queue.throttle.set
--@ command queue.throttle.get
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
    if queue then th_rcall('HSET', K.config, Q.mfield('throttle', queue), 1) end
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
    if queue then th_rcall('HSET', K.config, Q.mfield('throttle', queue), 0) end
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
