"""Client layer: ``Producer`` and ``Consumer`` over either broker, and the remote client (``remote/``).

The same Producer/Consumer surface runs over the embedded :class:`~lkstream.broker.broker.Broker`
or a :class:`~lkstream.client.remote.RemoteBroker`. May import the broker, ``lkstream.wire``,
``lkstream.security`` and ``lkstream.format``; never ``lkstream.server`` (an import contract).
"""
